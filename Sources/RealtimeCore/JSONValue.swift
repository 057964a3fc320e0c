public import Foundation
public import OrderedCollections

/// A JSON value, plus binary buffers, shared by the Socket.IO and SignalR protocols.
///
/// Objects keep their key order, so what you build is what goes on the wire. Numbers are exact:
/// an integer in the wire text (no fraction, no exponent) is kept as ``integer(_:)`` in the `Int64`
/// range and as ``unsignedInteger(_:)`` above it up to 2^64 - 1, so a 64-bit id (a .NET `long`, a
/// snowflake) arrives unchanged; any other number is a ``number(_:)`` (a `Double`), and integral
/// doubles are written without a fraction (`1`, not `1.0`). The three cases compare by numeric
/// value: `.integer(1) == .number(1)`. `.binary` values may sit at any depth: Socket.IO sends them as
/// attachments (`{"_placeholder":true,"num":i}` in the JSON, the bytes in a separate Engine.IO
/// message), SignalR's MessagePack protocol as `bin` values and its JSON protocol as base64 strings.
public enum JSONValue: Sendable {
    /// `null`.
    case null
    /// `true` or `false`.
    case bool(Bool)
    /// A number with a fraction or an exponent, or beyond the 64-bit integer ranges (a `Double`).
    case number(Double)
    /// An integer in the `Int64` range, exact.
    case integer(Int64)
    /// An integer above `Int64.max`, up to `UInt64.max`, exact.
    case unsignedInteger(UInt64)
    /// A string.
    case string(String)
    /// An array.
    case array([JSONValue])
    /// An object, its members in their order.
    case object(OrderedDictionary<String, JSONValue>)
    /// Binary data (MessagePack `bin`, a Socket.IO attachment); base64 in JSON text.
    case binary(Data)

    /// The string, if this is a string.
    public var stringValue: String? { if case .string(let value) = self { value } else { nil } }
    /// The boolean, if this is a boolean.
    public var boolValue: Bool? { if case .bool(let value) = self { value } else { nil } }
    /// The number as a `Double`, if this is a number (an integer beyond 2^53 is rounded here; read
    /// ``int64Value`` or ``uint64Value`` for it).
    public var doubleValue: Double? {
        switch self {
        case .number(let value): value
        case .integer(let value): Double(value)
        case .unsignedInteger(let value): Double(value)
        default: nil
        }
    }
    /// The number as an `Int` when it is integral and in range, exactly.
    public var intValue: Int? { int64Value.flatMap { Int(exactly: $0) } }
    /// The number as an `Int64` when it is integral and in range, exactly.
    public var int64Value: Int64? {
        switch self {
        case .integer(let value): value
        case .unsignedInteger(let value): Int64(exactly: value)
        case .number(let value): Int64(exactly: value)
        default: nil
        }
    }
    /// The number as a `UInt64` when it is integral, not negative and in range, exactly.
    public var uint64Value: UInt64? {
        switch self {
        case .integer(let value): UInt64(exactly: value)
        case .unsignedInteger(let value): value
        case .number(let value): UInt64(exactly: value)
        default: nil
        }
    }
    /// Whether this is a number (of any of the three cases).
    public var isNumber: Bool { doubleValue != nil }

    /// A number's value in one canonical form, for comparing and hashing across the three cases.
    enum NumericKey: Hashable {
        case signed(Int64)
        case unsigned(UInt64)
        case real(Double)
    }

    var numericKey: NumericKey? {
        switch self {
        case .integer(let value): return .signed(value)
        case .unsignedInteger(let value): return Int64(exactly: value).map { .signed($0) } ?? .unsigned(value)
        case .number(let value):
            if let exact = Int64(exactly: value) { return .signed(exact) }
            if let exact = UInt64(exactly: value) { return .unsigned(exact) }
            return .real(value)
        default: return nil
        }
    }
    /// The elements, if this is an array.
    public var arrayValue: [JSONValue]? { if case .array(let value) = self { value } else { nil } }
    /// The members in their received order, if this is an object.
    public var objectValue: OrderedDictionary<String, JSONValue>? { if case .object(let value) = self { value } else { nil } }
    /// The bytes, if this is binary data (MessagePack `bin`, Socket.IO attachments).
    public var binaryValue: Data? { if case .binary(let value) = self { value } else { nil } }
    /// Whether this is `null`.
    public var isNull: Bool { self == .null }

    /// The member `key` of an object, nil otherwise.
    public subscript(key: String) -> JSONValue? {
        if case .object(let members) = self { members[key] } else { nil }
    }

    /// The element at `index` of an array, nil when out of range or not an array.
    public subscript(index: Int) -> JSONValue? {
        guard case .array(let elements) = self, elements.indices.contains(index) else { return nil }
        return elements[index]
    }

    /// Whether a `.binary` value appears anywhere inside.
    public var containsBinary: Bool {
        switch self {
        case .binary: true
        case .array(let elements): elements.contains { $0.containsBinary }
        case .object(let members): members.values.contains { $0.containsBinary }
        default: false
        }
    }
}

extension JSONValue: Hashable {
    /// Objects compare as JSON objects: the same members, in any order.
    public static func == (lhs: JSONValue, rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.null, .null): true
        case (.bool(let a), .bool(let b)): a == b
        case (.number(let a), .number(let b)): a == b
        case (.integer(let a), .integer(let b)): a == b
        case (.number, _), (.integer, _), (.unsignedInteger, _):
            lhs.numericKey != nil && lhs.numericKey == rhs.numericKey
        case (.string(let a), .string(let b)): a == b
        case (.array(let a), .array(let b)): a == b
        case (.binary(let a), .binary(let b)): a == b
        case (.object(let a), .object(let b)):
            a.count == b.count && a.allSatisfy { key, value in b[key] == value }
        default: false
        }
    }

    /// Hashes the value; equal values hash alike.
    public func hash(into hasher: inout Hasher) {
        switch self {
        case .null: hasher.combine(0)
        case .bool(let value): hasher.combine(value)
        case .number, .integer, .unsignedInteger: hasher.combine(numericKey)
        case .string(let value): hasher.combine(value)
        case .array(let value): hasher.combine(value)
        case .binary(let value): hasher.combine(value)
        case .object(let members):
            // Order-independent, to agree with ==.
            var sum = 0
            for (key, value) in members {
                var inner = Hasher()
                inner.combine(key)
                inner.combine(value)
                sum &+= inner.finalize()
            }
            hasher.combine(members.count)
            hasher.combine(sum)
        }
    }
}

extension JSONValue: ExpressibleByNilLiteral, ExpressibleByBooleanLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByFloatLiteral, ExpressibleByStringLiteral, ExpressibleByArrayLiteral,
    ExpressibleByDictionaryLiteral
{
    /// `nil` is `null`.
    public init(nilLiteral: ()) { self = .null }
    /// `true` and `false` are JSON booleans.
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    /// An integer literal is a JSON number, exact.
    public init(integerLiteral value: Int64) { self = .integer(value) }
    /// A floating-point literal is a JSON number.
    public init(floatLiteral value: Double) { self = .number(value) }
    /// A string literal is a JSON string.
    public init(stringLiteral value: String) { self = .string(value) }
    /// An array literal is a JSON array.
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    /// A dictionary literal is a JSON object, its keys in the literal's order.
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(OrderedDictionary(elements, uniquingKeysWith: { _, last in last }))
    }
}

extension JSONValue: CustomStringConvertible {
    /// The JSON text (binary values shown as `<N bytes>`).
    public var description: String {
        if containsBinary {
            var attachments: [Data] = []
            var text = JSONWriter.string(self, attachments: &attachments)
            text += attachments.isEmpty ? "" : " + \(attachments.map { "<\($0.count) bytes>" }.joined(separator: ", "))"
            return text
        }
        return JSONWriter.string(self)
    }
}

// MARK: - Codable bridges

extension JSONValue {
    /// Encodes any `Encodable` value (through `JSONEncoder`) into a `JSONValue`.
    public init(encoding value: some Encodable, encoder: JSONEncoder = JSONEncoder()) throws {
        let data = try encoder.encode(value)
        self = try data.withUnsafeBytes { try JSONReader.parse($0) }
    }

    /// Decodes this value (through `JSONDecoder`) as `T`. Binary values cannot be decoded this way.
    public func decode<T: Decodable>(_ type: T.Type = T.self, decoder: JSONDecoder = JSONDecoder()) throws -> T {
        if containsBinary {
            throw JSONParseError(reason: "binary values cannot be decoded with JSONDecoder; read them with binaryValue", offset: 0)
        }
        return try decoder.decode(T.self, from: Data(JSONWriter.bytes(self)))
    }
}

extension JSONValue: Codable {
    /// Decodes a value from any `Decoder`.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() { self = .null }
        else if let value = try? container.decode(Bool.self) { self = .bool(value) }
        else if let value = try? container.decode(Int64.self) { self = .integer(value) }
        else if let value = try? container.decode(UInt64.self) { self = .unsignedInteger(value) }
        else if let value = try? container.decode(Double.self) { self = .number(value) }
        else if let value = try? container.decode(String.self) { self = .string(value) }
        else if let value = try? container.decode([JSONValue].self) { self = .array(value) }
        else if let value = try? container.decode([String: JSONValue].self) {
            self = .object(OrderedDictionary(uniqueKeysWithValues: value.sorted { $0.key < $1.key }))
        } else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a JSON value")
        }
    }

    /// Encodes the value to any `Encoder`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value): try container.encode(value)
        case .integer(let value): try container.encode(value)
        case .unsignedInteger(let value): try container.encode(value)
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(Dictionary(uniqueKeysWithValues: value.map { ($0.key, $0.value) }))
        case .binary(let value): try container.encode(value)
        }
    }
}

extension JSONValue {
    /// Parses JSON text (strict RFC 8259, nesting limited to 256 levels).
    public init(parsing text: String) throws {
        self = try JSONReader.parse(text)
    }

    /// The compact JSON text, as `JSON.stringify` writes it (binary values as Node's Buffer objects).
    public var jsonString: String { JSONWriter.string(self) }
}
