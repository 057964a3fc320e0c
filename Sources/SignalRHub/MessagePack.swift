package import Foundation
import OrderedCollections
import RealtimeCore

/// A MessagePack value (https://github.com/msgpack/msgpack/blob/master/spec.md), as SignalR's
/// MessagePack hub protocol carries it. Integers keep their signedness and floats their width, so a
/// value read and written again gives the same bytes when the writer chose the smallest encoding.
package enum MessagePackValue: Hashable, Sendable {
    case `nil`
    case bool(Bool)
    case int(Int64)
    case uint(UInt64)
    case float(Float)
    case double(Double)
    case string(String)
    case binary([UInt8])
    case array([MessagePackValue])
    /// Map entries in wire order (keys may be any value and may repeat on the wire).
    case map([MessagePackPair])
    /// An extension value; type -1 is the timestamp.
    case ext(type: Int8, data: [UInt8])
}

package struct MessagePackPair: Hashable, Sendable {
    package var key: MessagePackValue
    package var value: MessagePackValue
    package init(_ key: MessagePackValue, _ value: MessagePackValue) {
        self.key = key
        self.value = value
    }
}

/// Why bytes are not valid MessagePack, with the offset where the reader stopped.
public struct MessagePackError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The kind of failure.
    public enum Kind: Sendable, Equatable {
        /// The input ends inside a value.
        case truncated
        /// A byte that no format starts with (0xc1).
        case invalidFormat
        /// A str value whose bytes are not UTF-8.
        case invalidUTF8
        /// Arrays and maps nested deeper than `MessagePackReader/maxDepth`.
        case tooDeep
        /// A value of another type than the protocol needs at this place.
        case unexpectedType
    }

    /// The kind of failure.
    public let kind: Kind
    /// What the reader found.
    public let reason: String
    /// The byte offset where reading stopped.
    public let offset: Int

    package init(_ kind: Kind, _ reason: String, offset: Int) {
        self.kind = kind
        self.reason = reason
        self.offset = offset
    }

    /// A readable summary, for logs and messages.
    public var description: String { "MessagePack: \(reason) at byte \(offset)" }
}

/// Reads MessagePack values from a byte buffer. Lengths are checked against the bytes left before
/// anything is allocated, nesting is bounded, so no input crashes it or makes it allocate more than
/// a small multiple of the input's size.
package struct MessagePackReader {
    package static let maxDepth = 100

    private let bytes: UnsafeRawBufferPointer
    package private(set) var index: Int
    private var depth = 0

    package init(_ bytes: UnsafeRawBufferPointer, index: Int = 0) {
        self.bytes = bytes
        self.index = index
    }

    package var isAtEnd: Bool { index >= bytes.count }
    package var remaining: Int { bytes.count - index }

    /// Decodes exactly one value filling `bytes`.
    package static func decode(_ bytes: [UInt8]) throws(MessagePackError) -> MessagePackValue {
        let result: Result<MessagePackValue, MessagePackError> = bytes.withUnsafeBytes { raw in
            var reader = MessagePackReader(raw)
            do throws(MessagePackError) {
                let value = try reader.read()
                guard reader.isAtEnd else { throw MessagePackError(.unexpectedType, "trailing bytes after the value", offset: reader.index) }
                return .success(value)
            } catch {
                return .failure(error)
            }
        }
        return try result.get()
    }

    private func truncated() -> MessagePackError { MessagePackError(.truncated, "unexpected end of data", offset: index) }

    package mutating func readByte() throws(MessagePackError) -> UInt8 {
        guard index < bytes.count else { throw truncated() }
        defer { index += 1 }
        return bytes[index]
    }

    /// The next byte without consuming it.
    package func peek() throws(MessagePackError) -> UInt8 {
        guard index < bytes.count else { throw truncated() }
        return bytes[index]
    }

    private mutating func readBigEndian<T: FixedWidthInteger & UnsignedInteger>(_: T.Type) throws(MessagePackError) -> T {
        let size = MemoryLayout<T>.size
        guard remaining >= size else { throw truncated() }
        var value: T = 0
        for offset in 0..<size { value = value << 8 | T(bytes[index + offset]) }
        index += size
        return value
    }

    private mutating func readBytes(_ count: Int) throws(MessagePackError) -> UnsafeRawBufferPointer {
        guard count >= 0, remaining >= count else { throw truncated() }
        defer { index += count }
        return UnsafeRawBufferPointer(rebasing: bytes[index..<index + count])
    }

    private mutating func readString(_ count: Int) throws(MessagePackError) -> String {
        let start = index
        let raw = try readBytes(count)
        guard let text = String(validating: raw, as: UTF8.self) else {
            throw MessagePackError(.invalidUTF8, "str value is not valid UTF-8", offset: start)
        }
        return text
    }

    /// Reads one value of any type.
    package mutating func read() throws(MessagePackError) -> MessagePackValue {
        let start = index
        let byte = try readByte()
        switch byte {
        case 0x00...0x7f: return .int(Int64(byte))
        case 0x80...0x8f: return try readMap(Int(byte & 0x0f))
        case 0x90...0x9f: return try readArray(Int(byte & 0x0f))
        case 0xa0...0xbf: return .string(try readString(Int(byte & 0x1f)))
        case 0xc0: return .nil
        case 0xc2: return .bool(false)
        case 0xc3: return .bool(true)
        case 0xc4: return .binary(Array(try readBytes(Int(try readBigEndian(UInt8.self)))))
        case 0xc5: return .binary(Array(try readBytes(Int(try readBigEndian(UInt16.self)))))
        case 0xc6: return .binary(Array(try readBytes(Int(try readBigEndian(UInt32.self)))))
        case 0xc7: return try readExt(Int(try readBigEndian(UInt8.self)))
        case 0xc8: return try readExt(Int(try readBigEndian(UInt16.self)))
        case 0xc9: return try readExt(Int(try readBigEndian(UInt32.self)))
        case 0xca: return .float(Float(bitPattern: try readBigEndian(UInt32.self)))
        case 0xcb: return .double(Double(bitPattern: try readBigEndian(UInt64.self)))
        case 0xcc: return .uint(UInt64(try readBigEndian(UInt8.self)))
        case 0xcd: return .uint(UInt64(try readBigEndian(UInt16.self)))
        case 0xce: return .uint(UInt64(try readBigEndian(UInt32.self)))
        case 0xcf: return .uint(try readBigEndian(UInt64.self))
        case 0xd0: return .int(Int64(Int8(bitPattern: try readBigEndian(UInt8.self))))
        case 0xd1: return .int(Int64(Int16(bitPattern: try readBigEndian(UInt16.self))))
        case 0xd2: return .int(Int64(Int32(bitPattern: try readBigEndian(UInt32.self))))
        case 0xd3: return .int(Int64(bitPattern: try readBigEndian(UInt64.self)))
        case 0xd4: return try readExt(1)
        case 0xd5: return try readExt(2)
        case 0xd6: return try readExt(4)
        case 0xd7: return try readExt(8)
        case 0xd8: return try readExt(16)
        case 0xd9: return .string(try readString(Int(try readBigEndian(UInt8.self))))
        case 0xda: return .string(try readString(Int(try readBigEndian(UInt16.self))))
        case 0xdb: return .string(try readString(Int(try readBigEndian(UInt32.self))))
        case 0xdc: return try readArray(Int(try readBigEndian(UInt16.self)))
        case 0xdd: return try readArray(Int(try readBigEndian(UInt32.self)))
        case 0xde: return try readMap(Int(try readBigEndian(UInt16.self)))
        case 0xdf: return try readMap(Int(try readBigEndian(UInt32.self)))
        case 0xe0...0xff: return .int(Int64(Int8(bitPattern: byte)))
        default: throw MessagePackError(.invalidFormat, "0xc1 is never used", offset: start)
        }
    }

    /// Reads one value of any type straight into the hub's `JSONValue` (what the hub protocol hands
    /// to handlers and results), without building a ``MessagePackValue`` tree first: integers and
    /// floats become numbers, bin becomes binary, map keys that are not MessagePack str values
    /// become the JSON text of their value (a timestamp key keeps its quotes; arrays and maps are
    /// refused as keys, see `checkKey`), a repeated key keeps
    /// its first place and its last value, and the timestamp extension becomes an ISO 8601 string
    /// (other extensions become binary). Same limits as ``read()``.
    package mutating func readJSONValue() throws(MessagePackError) -> JSONValue {
        let start = index
        let byte = try readByte()
        switch byte {
        case 0x00...0x7f: return .integer(Int64(byte))
        case 0x80...0x8f: return try readJSONObject(Int(byte & 0x0f))
        case 0x90...0x9f: return try readJSONArray(Int(byte & 0x0f))
        case 0xa0...0xbf: return .string(try readString(Int(byte & 0x1f)))
        case 0xc0: return .null
        case 0xc2: return .bool(false)
        case 0xc3: return .bool(true)
        case 0xc4: return .binary(Data(try readBytes(Int(try readBigEndian(UInt8.self)))))
        case 0xc5: return .binary(Data(try readBytes(Int(try readBigEndian(UInt16.self)))))
        case 0xc6: return .binary(Data(try readBytes(Int(try readBigEndian(UInt32.self)))))
        case 0xc7...0xc9, 0xd4...0xd8:
            index = start
            return MessagePackHubProtocol.jsonValue(try read())
        case 0xca: return .number(Double(Float(bitPattern: try readBigEndian(UInt32.self))))
        case 0xcb: return .number(Double(bitPattern: try readBigEndian(UInt64.self)))
        case 0xcc: return .integer(Int64(try readBigEndian(UInt8.self)))
        case 0xcd: return .integer(Int64(try readBigEndian(UInt16.self)))
        case 0xce: return .integer(Int64(try readBigEndian(UInt32.self)))
        case 0xcf: return MessagePackHubProtocol.jsonValue(.uint(try readBigEndian(UInt64.self)))
        case 0xd0: return .integer(Int64(Int8(bitPattern: try readBigEndian(UInt8.self))))
        case 0xd1: return .integer(Int64(Int16(bitPattern: try readBigEndian(UInt16.self))))
        case 0xd2: return .integer(Int64(Int32(bitPattern: try readBigEndian(UInt32.self))))
        case 0xd3: return .integer(Int64(bitPattern: try readBigEndian(UInt64.self)))
        case 0xd9: return .string(try readString(Int(try readBigEndian(UInt8.self))))
        case 0xda: return .string(try readString(Int(try readBigEndian(UInt16.self))))
        case 0xdb: return .string(try readString(Int(try readBigEndian(UInt32.self))))
        case 0xdc: return try readJSONArray(Int(try readBigEndian(UInt16.self)))
        case 0xdd: return try readJSONArray(Int(try readBigEndian(UInt32.self)))
        case 0xde: return try readJSONObject(Int(try readBigEndian(UInt16.self)))
        case 0xdf: return try readJSONObject(Int(try readBigEndian(UInt32.self)))
        case 0xe0...0xff: return .integer(Int64(Int8(bitPattern: byte)))
        default: throw MessagePackError(.invalidFormat, "0xc1 is never used", offset: start)
        }
    }

    private mutating func readJSONArray(_ count: Int) throws(MessagePackError) -> JSONValue {
        guard count <= remaining else { throw truncated() }
        try enter()
        defer { depth -= 1 }
        var elements: [JSONValue] = []
        elements.reserveCapacity(count)
        for _ in 0..<count { elements.append(try readJSONValue()) }
        return .array(elements)
    }

    private mutating func readJSONObject(_ count: Int) throws(MessagePackError) -> JSONValue {
        guard count <= remaining / 2 else { throw truncated() }
        try enter()
        defer { depth -= 1 }
        var members = OrderedDictionary<String, JSONValue>(minimumCapacity: count)
        for _ in 0..<count {
            // Only a str key is taken as text; anything else (a timestamp's ISO string included)
            // becomes its JSON text.
            try checkKey()
            let isString = switch try peek() {
            case 0xa0...0xbf, 0xd9...0xdb: true
            default: false
            }
            let keyValue = try readJSONValue()
            let key: String = if isString, case .string(let text) = keyValue { text } else { keyValue.jsonString }
            members[key] = try readJSONValue()
        }
        return .object(members)
    }

    private mutating func readExt(_ count: Int) throws(MessagePackError) -> MessagePackValue {
        let type = Int8(bitPattern: try readByte())
        return .ext(type: type, data: Array(try readBytes(count)))
    }

    /// Map keys may be any scalar, not an array or a map. The hub turns a key that is not a str into
    /// its JSON text; a map key inside a map key would be escaped once more per level, doubling its
    /// backslashes each time (2^n bytes from a few bytes per level), so containers are refused as
    /// keys by both readers, before anything is built from them.
    private func checkKey() throws(MessagePackError) {
        switch try peek() {
        case 0x80...0x9f, 0xdc...0xdf:
            throw MessagePackError(.unexpectedType, "a map key must not be an array or a map", offset: index)
        default: return
        }
    }

    private mutating func enter() throws(MessagePackError) {
        depth += 1
        if depth > Self.maxDepth { throw MessagePackError(.tooDeep, "nested deeper than \(Self.maxDepth)", offset: index) }
    }

    private mutating func readArray(_ count: Int) throws(MessagePackError) -> MessagePackValue {
        // Every element takes at least one byte: a count beyond what is left is truncated data,
        // caught before any allocation.
        guard count <= remaining else { throw truncated() }
        try enter()
        defer { depth -= 1 }
        var elements: [MessagePackValue] = []
        elements.reserveCapacity(count)
        for _ in 0..<count { elements.append(try read()) }
        return .array(elements)
    }

    private mutating func readMap(_ count: Int) throws(MessagePackError) -> MessagePackValue {
        guard count <= remaining / 2 else { throw truncated() }
        try enter()
        defer { depth -= 1 }
        var pairs: [MessagePackPair] = []
        pairs.reserveCapacity(count)
        for _ in 0..<count {
            try checkKey()
            let key = try read()
            pairs.append(MessagePackPair(key, try read()))
        }
        return .map(pairs)
    }

    // MARK: Typed reads for the hub protocol (error messages name the field)

    /// An array header's element count.
    package mutating func readArrayHeader(_ field: String) throws(MessagePackError) -> Int {
        let start = index
        let byte = try readByte()
        let count: Int
        switch byte {
        case 0x90...0x9f: count = Int(byte & 0x0f)
        case 0xdc: count = Int(try readBigEndian(UInt16.self))
        case 0xdd: count = Int(try readBigEndian(UInt32.self))
        default:
            index = start
            throw MessagePackError(.unexpectedType, "reading array length for '\(field)' failed", offset: start)
        }
        guard count <= remaining else { throw truncated() }
        return count
    }

    /// A map header's entry count.
    package mutating func readMapHeader(_ field: String) throws(MessagePackError) -> Int {
        let start = index
        let byte = try readByte()
        let count: Int
        switch byte {
        case 0x80...0x8f: count = Int(byte & 0x0f)
        case 0xde: count = Int(try readBigEndian(UInt16.self))
        case 0xdf: count = Int(try readBigEndian(UInt32.self))
        default:
            index = start
            throw MessagePackError(.unexpectedType, "reading map length for '\(field)' failed", offset: start)
        }
        guard count <= remaining / 2 else { throw truncated() }
        return count
    }

    /// A str value (nil is not accepted).
    package mutating func readString(_ field: String) throws(MessagePackError) -> String {
        let start = index
        let byte = try readByte()
        switch byte {
        case 0xa0...0xbf: return try readString(Int(byte & 0x1f))
        case 0xd9: return try readString(Int(try readBigEndian(UInt8.self)))
        case 0xda: return try readString(Int(try readBigEndian(UInt16.self)))
        case 0xdb: return try readString(Int(try readBigEndian(UInt32.self)))
        default:
            index = start
            throw MessagePackError(.unexpectedType, "reading '\(field)' as String failed", offset: start)
        }
    }

    /// A str value or nil.
    package mutating func readOptionalString(_ field: String) throws(MessagePackError) -> String? {
        if try peek() == 0xc0 {
            index += 1
            return nil
        }
        return try readString(field)
    }

    /// Any integer format, as Int64 (uint64 beyond Int64.max is an error).
    package mutating func readInteger(_ field: String) throws(MessagePackError) -> Int64 {
        let start = index
        let value = try read()
        switch value {
        case .int(let number): return number
        case .uint(let number) where number <= UInt64(Int64.max): return Int64(number)
        default:
            index = start
            throw MessagePackError(.unexpectedType, "reading '\(field)' as an integer failed", offset: start)
        }
    }

    /// A bool.
    package mutating func readBool(_ field: String) throws(MessagePackError) -> Bool {
        let start = index
        switch try readByte() {
        case 0xc2: return false
        case 0xc3: return true
        default:
            index = start
            throw MessagePackError(.unexpectedType, "reading '\(field)' as Boolean failed", offset: start)
        }
    }

    /// Skips one value of any type.
    package mutating func skip() throws(MessagePackError) {
        _ = try read()
    }
}

/// Writes MessagePack values with the smallest encoding for each.
package struct MessagePackWriter {
    package var bytes: [UInt8]

    package init(capacity: Int = 64) {
        bytes = []
        if capacity > 0 { bytes.reserveCapacity(capacity) }
    }

    package static func encode(_ value: MessagePackValue) -> [UInt8] {
        var writer = MessagePackWriter()
        writer.write(value)
        return writer.bytes
    }

    @inline(__always)
    private mutating func appendBigEndian<T: FixedWidthInteger>(_ value: T) {
        var big = value.bigEndian
        withUnsafeBytes(of: &big) { bytes.append(contentsOf: $0) }
    }

    package mutating func write(_ value: MessagePackValue) {
        switch value {
        case .nil: writeNil()
        case .bool(let flag): writeBool(flag)
        case .int(let number): writeInteger(number)
        case .uint(let number): writeUnsigned(number)
        case .float(let number):
            bytes.append(0xca)
            appendBigEndian(number.bitPattern)
        case .double(let number): writeDouble(number)
        case .string(let text): writeString(text)
        case .binary(let data): writeBinary(data)
        case .array(let elements):
            writeArrayHeader(elements.count)
            for element in elements { write(element) }
        case .map(let pairs):
            writeMapHeader(pairs.count)
            for pair in pairs {
                write(pair.key)
                write(pair.value)
            }
        case .ext(let type, let data): writeExt(type: type, data)
        }
    }

    package mutating func writeNil() { bytes.append(0xc0) }
    package mutating func writeBool(_ flag: Bool) { bytes.append(flag ? 0xc3 : 0xc2) }

    package mutating func writeInteger(_ number: Int64) {
        if number >= 0 { return writeUnsigned(UInt64(number)) }
        switch number {
        case -32..<0: bytes.append(UInt8(bitPattern: Int8(number)))
        case Int64(Int8.min)..<0: bytes.append(0xd0); appendBigEndian(Int8(number))
        case Int64(Int16.min)..<0: bytes.append(0xd1); appendBigEndian(Int16(number))
        case Int64(Int32.min)..<0: bytes.append(0xd2); appendBigEndian(Int32(number))
        default: bytes.append(0xd3); appendBigEndian(number)
        }
    }

    package mutating func writeUnsigned(_ number: UInt64) {
        switch number {
        case 0..<0x80: bytes.append(UInt8(number))
        case 0..<0x100: bytes.append(0xcc); bytes.append(UInt8(number))
        case 0..<0x10000: bytes.append(0xcd); appendBigEndian(UInt16(number))
        case 0..<0x1_0000_0000: bytes.append(0xce); appendBigEndian(UInt32(number))
        default: bytes.append(0xcf); appendBigEndian(number)
        }
    }

    package mutating func writeDouble(_ number: Double) {
        bytes.append(0xcb)
        appendBigEndian(number.bitPattern)
    }

    package mutating func writeString(_ text: String) {
        var text = text
        text.withUTF8 { utf8 in
            let count = utf8.count
            switch count {
            case 0..<32: bytes.append(0xa0 | UInt8(count))
            case 0..<0x100: bytes.append(0xd9); bytes.append(UInt8(count))
            case 0..<0x10000: bytes.append(0xda); appendBigEndian(UInt16(count))
            default: bytes.append(0xdb); appendBigEndian(UInt32(count))
            }
            bytes.append(contentsOf: utf8)
        }
    }

    package mutating func writeBinary(_ data: some Collection<UInt8>) {
        let count = data.count
        switch count {
        case 0..<0x100: bytes.append(0xc4); bytes.append(UInt8(count))
        case 0..<0x10000: bytes.append(0xc5); appendBigEndian(UInt16(count))
        default: bytes.append(0xc6); appendBigEndian(UInt32(count))
        }
        bytes.append(contentsOf: data)
    }

    package mutating func writeArrayHeader(_ count: Int) {
        switch count {
        case 0..<16: bytes.append(0x90 | UInt8(count))
        case 0..<0x10000: bytes.append(0xdc); appendBigEndian(UInt16(count))
        default: bytes.append(0xdd); appendBigEndian(UInt32(count))
        }
    }

    package mutating func writeMapHeader(_ count: Int) {
        switch count {
        case 0..<16: bytes.append(0x80 | UInt8(count))
        case 0..<0x10000: bytes.append(0xde); appendBigEndian(UInt16(count))
        default: bytes.append(0xdf); appendBigEndian(UInt32(count))
        }
    }

    package mutating func writeExt(type: Int8, _ data: [UInt8]) {
        switch data.count {
        case 1: bytes.append(0xd4)
        case 2: bytes.append(0xd5)
        case 4: bytes.append(0xd6)
        case 8: bytes.append(0xd7)
        case 16: bytes.append(0xd8)
        case 0..<0x100: bytes.append(0xc7); bytes.append(UInt8(data.count))
        case 0..<0x10000: bytes.append(0xc8); appendBigEndian(UInt16(data.count))
        default: bytes.append(0xc9); appendBigEndian(UInt32(data.count))
        }
        bytes.append(UInt8(bitPattern: type))
        bytes.append(contentsOf: data)
    }
}

// MARK: - Timestamps (extension type -1)

extension MessagePackValue {
    /// The instant of a timestamp extension value (32, 64 and 96-bit forms), nil for anything else.
    package var timestamp: Date? {
        guard case .ext(-1, let data) = self else { return nil }
        func bigEndian(_ range: Range<Int>) -> UInt64 { data[range].reduce(0) { $0 << 8 | UInt64($1) } }
        switch data.count {
        case 4: return Date(timeIntervalSince1970: Double(bigEndian(0..<4)))
        case 8:
            let raw = bigEndian(0..<8)
            return Date(timeIntervalSince1970: Double(raw & 0x3_FFFF_FFFF) + Double(raw >> 34) / 1e9)
        case 12:
            let seconds = Int64(bitPattern: bigEndian(4..<12))
            return Date(timeIntervalSince1970: Double(seconds) + Double(bigEndian(0..<4)) / 1e9)
        default: return nil
        }
    }
}
