import Foundation
public import RealtimeCore

/// Converts between Swift values and the `JSONValue`s hub messages carry, the same way for both
/// protocols: straight to and from the value (`HubValueEncoder`, `HubValueDecoder`), with the results
/// and errors of `JSONEncoder` and `JSONDecoder`, `Data` as `.binary` (base64 in JSON, `bin` in
/// MessagePack) and `Date` as an ISO 8601 string (MessagePack timestamps arrive as one).
public enum HubValueCoding {
    /// Encodes `value` as a hub argument.
    public static func encode<T: Encodable>(_ value: T) throws -> JSONValue {
        // The common scalars without an encoder, compared by type first (a dynamic cast costs more
        // than the rest); a non-finite Double, and everything else, is HubValueEncoder's.
        if T.self == String.self || T.self == Bool.self || T.self == Int.self || T.self == Double.self || T.self == [UInt8].self {
            switch value {
            case let value as String: return .string(value)
            case let value as Bool: return .bool(value)
            case let value as Int: return .integer(Int64(value))
            case let value as Double where value.isFinite: return .number(value)
            case let value as [UInt8]: return .binary(Data(value))
            default: break
            }
        }
        return try HubValueEncoder.encode(value)
    }

    /// The way `encode` worked before `HubValueEncoder`: `JSONEncoder`'s text, read back. Kept for
    /// the tests that check both agree.
    static func encodeThroughJSONText(_ value: some Encodable) throws -> JSONValue {
        try JSONValue(encoding: value, encoder: encoder())
    }

    /// Decodes a hub argument, item or result as `T`.
    public static func decode<T: Decodable>(_ value: JSONValue, as type: T.Type = T.self) throws -> T {
        // Fast paths for the common types; anything else (or a value of another kind) goes through
        // HubValueDecoder, which reports a mismatch as JSONDecoder's typed DecodingError.
        // `unsafeBitCast` where `T` is the very type (no dynamic cast through `Any`).
        switch value {
        case _ where type == JSONValue.self: return unsafeBitCast(value, to: T.self)
        case .binary(let data) where type == Data.self: return unsafeBitCast(data, to: T.self)
        case .binary(let data) where type == [UInt8].self: return unsafeBitCast(Array(data), to: T.self)
        case .string(let text) where type == String.self: return unsafeBitCast(text, to: T.self)
        case .bool(let flag) where type == Bool.self: return unsafeBitCast(flag, to: T.self)
        case _ where type == Int.self:
            if let number = value.intValue { return unsafeBitCast(number, to: T.self) }
        case _ where type == Double.self:
            if let number = value.doubleValue { return unsafeBitCast(number, to: T.self) }
        default: break
        }
        return try HubValueDecoder.decode(T.self, from: value)
    }

    /// The way `decode` worked before `HubValueDecoder`: the value as JSON text, read by
    /// `JSONDecoder`. Kept for the tests that check both agree.
    static func decodeThroughJSONText<T: Decodable>(_ value: JSONValue, as type: T.Type = T.self) throws -> T {
        try decoder().decode(T.self, from: Data(JSONWriter.bytes(value.base64EncodingBinary())))
    }

    static func encoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(MessagePackHubProtocol.iso8601(date))
        }
        return encoder
    }

    static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            for options: ISO8601DateFormatter.Options in [[.withInternetDateTime], [.withInternetDateTime, .withFractionalSeconds]] {
                let formatter = ISO8601DateFormatter()
                formatter.formatOptions = options
                if let date = formatter.date(from: text) { return date }
            }
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not an ISO 8601 date: \(text)")
        }
        return decoder
    }
}

/// Why the arguments of an invocation from the server do not fit a handler's parameters.
public struct HubBindingError: Error, Sendable, CustomStringConvertible {
    /// The client method the invocation named.
    public let target: String
    /// What did not fit: the count, or the argument that failed to decode and why.
    public let reason: String

    /// A readable summary, for logs and messages.
    public var description: String { "cannot bind the arguments of '\(target)': \(reason)" }

    package init(target: String, reason: String) {
        self.target = target
        self.reason = reason
    }
}

/// Binds invocation arguments to typed parameters: the count must match and each value must decode.
public enum HubArgumentBinder {
    /// Decodes `arguments` as the given types, one each; throws when the count differs or a value
    /// does not decode.
    public static func bind<each T: Decodable>(
        _ arguments: [JSONValue], target: String = "", as types: repeat (each T).Type
    ) throws(HubBindingError) -> (repeat each T) {
        var expected = 0
        for _ in repeat (each types) { expected += 1 }
        guard arguments.count == expected else {
            throw HubBindingError(target: target, reason: "invocation provides \(arguments.count) argument(s) but target expects \(expected)")
        }
        var index = 0
        func next<V: Decodable>(_ type: V.Type) throws(HubBindingError) -> V {
            defer { index += 1 }
            do {
                return try HubValueCoding.decode(arguments[index], as: V.self)
            } catch {
                throw HubBindingError(target: target, reason: "argument \(index) is not a \(V.self): \(error)")
            }
        }
        return (repeat try next(each types))
    }
}
