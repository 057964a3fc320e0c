import Foundation
import OrderedCollections
import RealtimeCore

/// A `Decoder` that reads a `JSONValue` tree directly, for typed handler arguments, stream items and
/// results: the same results and the same `DecodingError`s as writing the value as JSON text and
/// reading that with `JSONDecoder` (what `HubValueCoding` did before), without the text.
///
/// Rules, as `JSONDecoder` with `HubValueCoding`'s date strategy: integers must be integral and in
/// range of their type, floats in range; `Date` from an ISO 8601 string (with or without fractional
/// seconds); `Data` from `.binary` or a base64 string; `URL` from a string; `Decimal` from a number;
/// a `.binary` value read as anything else is its base64 string (how the JSON text carried it);
/// a `JSONValue` member is taken as it is (key order and binary values kept).
struct HubValueDecoder {
    static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try HubValueDecoding(value: value, codingPath: []).unwrap(T.self)
    }
}

private struct HubValueDecoding: Decoder {
    let value: JSONValue
    /// The path to the container holding this value, and the key within it: the full path is only
    /// built when asked for (an error, a nested container), not for every member read.
    let basePath: [any CodingKey]
    let key: (any CodingKey)?
    var codingPath: [any CodingKey] { key.map { basePath + [$0] } ?? basePath }
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    init(value: JSONValue, codingPath: [any CodingKey], key: (any CodingKey)? = nil) {
        self.value = value
        self.basePath = codingPath
        self.key = key
    }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .object(let members) = value else {
            if case .null = value {
                throw DecodingError.valueNotFound(KeyedDecodingContainer<Key>.self, .init(codingPath: codingPath, debugDescription: "Cannot get keyed decoding container -- found null value instead"))
            }
            throw DecodingError.typeMismatch([String: Any].self, .init(codingPath: codingPath, debugDescription: "Expected to decode Dictionary<String, Any> but found \(value.kindName) instead."))
        }
        return KeyedDecodingContainer(KeyedContainer<Key>(members: members, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard case .array(let elements) = value else {
            if case .null = value {
                throw DecodingError.valueNotFound((any UnkeyedDecodingContainer).self, .init(codingPath: codingPath, debugDescription: "Cannot get unkeyed decoding container -- found null value instead"))
            }
            throw DecodingError.typeMismatch([Any].self, .init(codingPath: codingPath, debugDescription: "Expected to decode Array<Any> but found \(value.kindName) instead."))
        }
        return UnkeyedContainer(elements: elements, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { SingleValue(decoder: self) }

    // MARK: Scalars and the types JSONDecoder reads specially

    func unwrap<T: Decodable>(_ type: T.Type) throws -> T {
        let special: Any? = switch T.self {
        case is JSONValue.Type: value
        case is Date.Type: try decodeDate()
        case is Data.Type: try decodeData()
        case is URL.Type: try decodeURL()
        case is Decimal.Type: try decodeDecimal()
        default: nil
        }
        if let special, let result = special as? T { return result }
        return try T(from: self)
    }

    func mismatch<T>(_ type: T.Type) -> DecodingError {
        if case .null = value {
            return .valueNotFound(T.self, .init(codingPath: codingPath, debugDescription: "Cannot get value of type \(T.self) -- found null value instead"))
        }
        return .typeMismatch(T.self, .init(codingPath: codingPath, debugDescription: "Expected to decode \(T.self) but found \(value.kindName) instead."))
    }

    func decodeString() throws -> String {
        switch value {
        case .string(let text): return text
        case .binary(let data): return data.base64EncodedString()
        default: throw mismatch(String.self)
        }
    }

    func decodeBool() throws -> Bool {
        guard case .bool(let flag) = value else { throw mismatch(Bool.self) }
        return flag
    }

    func decodeNumber<T: BinaryFloatingPoint>(_ type: T.Type) throws -> T {
        guard let number = value.doubleValue else { throw mismatch(T.self) }
        let result = T(number)
        // As JSONDecoder: a number that does not fit (beyond the range, or so small that it
        // becomes zero) is an error.
        guard result.isFinite || !number.isFinite, result != 0 || number == 0 else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "Number \(number) does not fit in \(T.self)."))
        }
        return result
    }

    /// Exact: an integer the wire carried decodes into any type that holds it (an `Int64` or
    /// `UInt64` field gets every bit), a double only when it is integral and in range.
    func decodeInteger<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
        let result: T?
        switch value {
        case .integer(let number): result = T(exactly: number)
        case .unsignedInteger(let number): result = T(exactly: number)
        case .number(let number): result = T(exactly: number)
        default: throw mismatch(T.self)
        }
        guard let result else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "Number \(value) is not representable in Swift."))
        }
        return result
    }

    func decodeDate() throws -> Date {
        let text = try decodeString()
        for options: ISO8601DateFormatter.Options in [[.withInternetDateTime], [.withInternetDateTime, .withFractionalSeconds]] {
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = options
            if let date = formatter.date(from: text) { return date }
        }
        throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "not an ISO 8601 date: \(text)"))
    }

    func decodeData() throws -> Data {
        switch value {
        case .binary(let data): return data
        case .string(let text):
            guard let data = Data(base64Encoded: text) else {
                throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "Encountered Data is not valid Base64."))
            }
            return data
        default: throw mismatch(String.self)
        }
    }

    func decodeURL() throws -> URL {
        let text = try decodeString()
        guard let url = URL(string: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "Invalid URL string."))
        }
        return url
    }

    func decodeDecimal() throws -> Decimal {
        guard value.isNumber else { throw mismatch(Decimal.self) }
        // The number as JSON writes it, read as a Decimal: what JSONDecoder made of the same text.
        let text = JSONWriter.string(value)
        guard let decimal = Decimal(string: text, locale: Locale(identifier: "en_US_POSIX")) else {
            throw DecodingError.dataCorrupted(.init(codingPath: codingPath, debugDescription: "Number \(text) is not representable as a Decimal."))
        }
        return decimal
    }

}

/// An array element's place in a coding path, as JSONDecoder and JSONEncoder name it.
struct IndexKey: CodingKey {
    let intValue: Int?
    var stringValue: String { "Index \(intValue!)" }
    init(_ index: Int) { intValue = index }
    init?(stringValue: String) { nil }
    init?(intValue: Int) { self.intValue = intValue }
}

/// The key `superDecoder()` and `superEncoder()` use.
struct SuperKey: CodingKey {
    var stringValue: String { "super" }
    var intValue: Int? { nil }
    init() {}
    init?(stringValue: String) { nil }
    init?(intValue: Int) { nil }
}

private struct SingleValue: SingleValueDecodingContainer {
    let decoder: HubValueDecoding
    var codingPath: [any CodingKey] { decoder.codingPath }

    func decodeNil() -> Bool { decoder.value == .null }
    func decode(_ type: Bool.Type) throws -> Bool { try decoder.decodeBool() }
    func decode(_ type: String.Type) throws -> String { try decoder.decodeString() }
    func decode(_ type: Double.Type) throws -> Double { try decoder.decodeNumber(Double.self) }
    func decode(_ type: Float.Type) throws -> Float { try decoder.decodeNumber(Float.self) }
    func decode(_ type: Int.Type) throws -> Int { try decoder.decodeInteger(Int.self) }
    func decode(_ type: Int8.Type) throws -> Int8 { try decoder.decodeInteger(Int8.self) }
    func decode(_ type: Int16.Type) throws -> Int16 { try decoder.decodeInteger(Int16.self) }
    func decode(_ type: Int32.Type) throws -> Int32 { try decoder.decodeInteger(Int32.self) }
    func decode(_ type: Int64.Type) throws -> Int64 { try decoder.decodeInteger(Int64.self) }
    func decode(_ type: UInt.Type) throws -> UInt { try decoder.decodeInteger(UInt.self) }
    func decode(_ type: UInt8.Type) throws -> UInt8 { try decoder.decodeInteger(UInt8.self) }
    func decode(_ type: UInt16.Type) throws -> UInt16 { try decoder.decodeInteger(UInt16.self) }
    func decode(_ type: UInt32.Type) throws -> UInt32 { try decoder.decodeInteger(UInt32.self) }
    func decode(_ type: UInt64.Type) throws -> UInt64 { try decoder.decodeInteger(UInt64.self) }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try decoder.unwrap(T.self) }
}

private struct KeyedContainer<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let members: OrderedDictionary<String, JSONValue>
    let codingPath: [any CodingKey]

    var allKeys: [Key] { members.keys.compactMap { Key(stringValue: $0) } }
    func contains(_ key: Key) -> Bool { members[key.stringValue] != nil }

    private func member(_ key: Key) throws -> HubValueDecoding {
        guard let value = members[key.stringValue] else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "No value associated with key \(key) (\"\(key.stringValue)\")."))
        }
        return HubValueDecoding(value: value, codingPath: codingPath, key: key)
    }

    func decodeNil(forKey key: Key) throws -> Bool { try member(key).value == .null }
    func decode(_ type: Bool.Type, forKey key: Key) throws -> Bool { try member(key).decodeBool() }
    func decode(_ type: String.Type, forKey key: Key) throws -> String { try member(key).decodeString() }
    func decode(_ type: Double.Type, forKey key: Key) throws -> Double { try member(key).decodeNumber(Double.self) }
    func decode(_ type: Float.Type, forKey key: Key) throws -> Float { try member(key).decodeNumber(Float.self) }
    func decode(_ type: Int.Type, forKey key: Key) throws -> Int { try member(key).decodeInteger(Int.self) }
    func decode(_ type: Int8.Type, forKey key: Key) throws -> Int8 { try member(key).decodeInteger(Int8.self) }
    func decode(_ type: Int16.Type, forKey key: Key) throws -> Int16 { try member(key).decodeInteger(Int16.self) }
    func decode(_ type: Int32.Type, forKey key: Key) throws -> Int32 { try member(key).decodeInteger(Int32.self) }
    func decode(_ type: Int64.Type, forKey key: Key) throws -> Int64 { try member(key).decodeInteger(Int64.self) }
    func decode(_ type: UInt.Type, forKey key: Key) throws -> UInt { try member(key).decodeInteger(UInt.self) }
    func decode(_ type: UInt8.Type, forKey key: Key) throws -> UInt8 { try member(key).decodeInteger(UInt8.self) }
    func decode(_ type: UInt16.Type, forKey key: Key) throws -> UInt16 { try member(key).decodeInteger(UInt16.self) }
    func decode(_ type: UInt32.Type, forKey key: Key) throws -> UInt32 { try member(key).decodeInteger(UInt32.self) }
    func decode(_ type: UInt64.Type, forKey key: Key) throws -> UInt64 { try member(key).decodeInteger(UInt64.self) }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T { try member(key).unwrap(T.self) }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try member(key).container(keyedBy: NestedKey.self)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try member(key).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder {
        HubValueDecoding(value: members["super"] ?? .null, codingPath: codingPath, key: SuperKey())
    }

    func superDecoder(forKey key: Key) throws -> any Decoder {
        HubValueDecoding(value: members[key.stringValue] ?? .null, codingPath: codingPath, key: key)
    }
}

private struct UnkeyedContainer: UnkeyedDecodingContainer {
    let elements: [JSONValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0

    init(elements: [JSONValue], codingPath: [any CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    private mutating func next<T>(_ type: T.Type) throws -> HubValueDecoding {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(T.self, .init(codingPath: codingPath + [IndexKey(currentIndex)], debugDescription: "Unkeyed container is at end."))
        }
        defer { currentIndex += 1 }
        return HubValueDecoding(value: elements[currentIndex], codingPath: codingPath, key: IndexKey(currentIndex))
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(Any?.self, .init(codingPath: codingPath + [IndexKey(currentIndex)], debugDescription: "Unkeyed container is at end."))
        }
        guard elements[currentIndex] == .null else { return false }
        currentIndex += 1
        return true
    }

    mutating func decode(_ type: Bool.Type) throws -> Bool { try next(Bool.self).decodeBool() }
    mutating func decode(_ type: String.Type) throws -> String { try next(String.self).decodeString() }
    mutating func decode(_ type: Double.Type) throws -> Double { try next(Double.self).decodeNumber(Double.self) }
    mutating func decode(_ type: Float.Type) throws -> Float { try next(Float.self).decodeNumber(Float.self) }
    mutating func decode(_ type: Int.Type) throws -> Int { try next(Int.self).decodeInteger(Int.self) }
    mutating func decode(_ type: Int8.Type) throws -> Int8 { try next(Int8.self).decodeInteger(Int8.self) }
    mutating func decode(_ type: Int16.Type) throws -> Int16 { try next(Int16.self).decodeInteger(Int16.self) }
    mutating func decode(_ type: Int32.Type) throws -> Int32 { try next(Int32.self).decodeInteger(Int32.self) }
    mutating func decode(_ type: Int64.Type) throws -> Int64 { try next(Int64.self).decodeInteger(Int64.self) }
    mutating func decode(_ type: UInt.Type) throws -> UInt { try next(UInt.self).decodeInteger(UInt.self) }
    mutating func decode(_ type: UInt8.Type) throws -> UInt8 { try next(UInt8.self).decodeInteger(UInt8.self) }
    mutating func decode(_ type: UInt16.Type) throws -> UInt16 { try next(UInt16.self).decodeInteger(UInt16.self) }
    mutating func decode(_ type: UInt32.Type) throws -> UInt32 { try next(UInt32.self).decodeInteger(UInt32.self) }
    mutating func decode(_ type: UInt64.Type) throws -> UInt64 { try next(UInt64.self).decodeInteger(UInt64.self) }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T { try next(T.self).unwrap(T.self) }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        try next([String: Any].self).container(keyedBy: NestedKey.self)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        try next([Any].self).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder { try next(Any.self) }
}

private extension JSONValue {
    /// How JSONDecoder's messages name the kind of a value.
    var kindName: String {
        switch self {
        case .null: "null"
        case .bool: "bool"
        case .number, .integer, .unsignedInteger: "number"
        case .string, .binary: "a string"
        case .array: "an array"
        case .object: "a dictionary"
        }
    }
}
