package import Foundation
import OrderedCollections

/// Writes `JSONValue`s as JSON text the way JavaScript's `JSON.stringify` does (the format
/// socket.io-parser produces): no spaces, `\uXXXX` in lower case for control characters, integral
/// numbers without a fraction, non-finite numbers as `null`. Shared by the Socket.IO and SignalR JSON
/// protocols.
package enum JSONWriter {
    package static func bytes(_ value: JSONValue) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        var attachments: [Data]? = nil
        write(value, into: &out, attachments: &attachments)
        return out
    }

    package static func string(_ value: JSONValue) -> String {
        String(decoding: bytes(value), as: UTF8.self)
    }

    /// Writes `value`, replacing each `.binary` with a placeholder and collecting its bytes in order.
    package static func string(_ value: JSONValue, attachments: inout [Data]) -> String {
        var out: [UInt8] = []
        out.reserveCapacity(64)
        var collected: [Data]? = attachments
        write(value, into: &out, attachments: &collected)
        attachments = collected ?? []
        return String(decoding: out, as: UTF8.self)
    }

    package static func write(_ value: JSONValue, into out: inout [UInt8], attachments: inout [Data]?) {
        switch value {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let flag): out.append(contentsOf: (flag ? "true" : "false").utf8)
        case .number(let number): writeNumber(number, into: &out)
        case .integer(let number): writeInteger(number, into: &out)
        case .unsignedInteger(let number): out.append(contentsOf: String(number).utf8)
        case .string(let text): writeString(text, into: &out)
        case .array(let elements):
            out.append(UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                write(element, into: &out, attachments: &attachments)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            var first = true
            for (key, member) in members {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                writeString(key, into: &out)
                out.append(UInt8(ascii: ":"))
                write(member, into: &out, attachments: &attachments)
            }
            out.append(UInt8(ascii: "}"))
        case .binary(let data):
            if attachments != nil {
                out.append(contentsOf: #"{"_placeholder":true,"num":"#.utf8)
                writeInteger(attachments!.count, into: &out)
                out.append(UInt8(ascii: "}"))
                attachments!.append(data)
            } else {
                // Outside a packet (descriptions, Codable bridges): JSON has no bytes; write an
                // object like Node's Buffer.toJSON.
                out.append(contentsOf: #"{"type":"Buffer","data":["#.utf8)
                for (index, byte) in data.enumerated() {
                    if index > 0 { out.append(UInt8(ascii: ",")) }
                    writeInteger(Int(byte), into: &out)
                }
                out.append(contentsOf: "]}".utf8)
            }
        }
    }

    package static func writeInteger(_ value: Int, into out: inout [UInt8]) {
        if value >= 0 && value < 10 {
            out.append(UInt8(ascii: "0") + UInt8(value))
            return
        }
        out.append(contentsOf: String(value).utf8)
    }

    package static func writeInteger(_ value: Int64, into out: inout [UInt8]) {
        if let small = Int(exactly: value) { return writeInteger(small, into: &out) }
        out.append(contentsOf: String(value).utf8)
    }

    package static func writeNumber(_ number: Double, into out: inout [UInt8]) {
        guard number.isFinite else {
            out.append(contentsOf: "null".utf8)
            return
        }
        if number.rounded() == number && abs(number) < 1e15 {
            // -0 keeps its sign (JSON.stringify drops it; the value would not read back the same).
            if number == 0 { out.append(contentsOf: (number.sign == .minus ? "-0" : "0").utf8); return }
            writeInteger(Int(number), into: &out)
            return
        }
        // Swift's shortest round-trip form, adjusted to JSON: "1e+20" is fine, "inf" cannot occur.
        out.append(contentsOf: "\(number)".utf8)
    }

    private static let hexDigits: [UInt8] = Array("0123456789abcdef".utf8)

    package static func writeString(_ text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        var text = text
        text.withUTF8 { bytes in
            var runStart = 0
            for index in 0..<bytes.count {
                let byte = bytes[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                if runStart < index { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart..<index])) }
                runStart = index + 1
                out.append(UInt8(ascii: "\\"))
                switch byte {
                case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
                case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
                case 0x08: out.append(UInt8(ascii: "b"))
                case 0x0C: out.append(UInt8(ascii: "f"))
                case 0x0A: out.append(UInt8(ascii: "n"))
                case 0x0D: out.append(UInt8(ascii: "r"))
                case 0x09: out.append(UInt8(ascii: "t"))
                default:
                    out.append(contentsOf: "u00".utf8)
                    out.append(hexDigits[Int(byte >> 4)])
                    out.append(hexDigits[Int(byte & 0xF)])
                }
            }
            if runStart < bytes.count { out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[runStart...])) }
        }
        out.append(UInt8(ascii: "\""))
    }
}

/// Why JSON text could not be parsed: what was wrong and the byte offset where it was found.
public struct JSONParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What was wrong, e.g. "expected ',' or ']'".
    public let reason: String
    /// The byte offset in the input where the parser stopped.
    public let offset: Int

    package init(reason: String, offset: Int) {
        self.reason = reason
        self.offset = offset
    }

    /// A readable summary, for logs and messages.
    public var description: String { "\(reason) at byte \(offset)" }
}

/// A strict JSON parser (RFC 8259) over UTF-8 bytes, with a nesting limit so hostile input cannot
/// exhaust the stack. Shared by the Socket.IO and SignalR JSON protocols.
package struct JSONReader {
    package static let maxDepth = 256
    /// The capacity a non-empty array or object starts with.
    static let initialCapacity = 4

    private let bytes: UnsafeRawBufferPointer
    private var index: Int
    private var depth = 0
    /// A string the input is likely to hold (``parse(_:reusing:)``).
    private var known: String?

    private init(_ bytes: UnsafeRawBufferPointer, index: Int) {
        self.bytes = bytes
        self.index = index
    }

    /// Parses one JSON value that must fill `bytes` (surrounding whitespace allowed).
    package static func parse(_ bytes: UnsafeRawBufferPointer) throws(JSONParseError) -> JSONValue {
        var reader = JSONReader(bytes, index: 0)
        return try reader.parseWhole()
    }

    /// Parses as ``parse(_:)-(UnsafeRawBufferPointer)`` does; a string in the input equal to
    /// `known` is given as `known` itself, without making a new one (a protocol whose messages
    /// repeat a name, such as an event's, passes the last one).
    package static func parse(_ bytes: UnsafeRawBufferPointer, reusing known: String) throws(JSONParseError) -> JSONValue {
        var reader = JSONReader(bytes, index: 0)
        reader.known = known
        return try reader.parseWhole()
    }

    /// One JSON value that must fill the input (surrounding whitespace allowed).
    private mutating func parseWhole() throws(JSONParseError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue()
        skipWhitespace()
        guard index == bytes.count else { throw failure("unexpected data after the JSON value") }
        return value
    }

    /// Parses one JSON value that must fill `bytes`, as ``parse(_:)-(UnsafeRawBufferPointer)`` does; when it
    /// is an object, hands `member` each member's name (its UTF-8, unescaped) and this reader at
    /// the member's value instead of building the object: a protocol reading a few known members
    /// keeps no dictionary, and reads each value as the type it expects, with ``string()``,
    /// ``integer()`` or ``array()`` (each reads nothing when the value is of another kind) or
    /// ``value()``. A value left unread is read and dropped. Returns whether the value was an
    /// object; another kind of value is parsed, checked and dropped.
    package static func parseMembers(
        _ bytes: UnsafeRawBufferPointer, reading member: (UnsafeRawBufferPointer, inout JSONReader) throws(JSONParseError) -> Void
    ) throws(JSONParseError) -> Bool {
        var reader = JSONReader(bytes, index: 0)
        reader.skipWhitespace()
        let isObject = reader.index < bytes.count && bytes[reader.index] == UInt8(ascii: "{")
        if isObject {
            try reader.parseMembers(reading: member)
        } else {
            _ = try reader.parseValue()
        }
        reader.skipWhitespace()
        guard reader.index == bytes.count else { throw reader.failure("unexpected data after the JSON value") }
        return isObject
    }

    /// The value at the reader (``parseMembers(_:reading:)``).
    package mutating func value() throws(JSONParseError) -> JSONValue { try parseValue() }

    /// The string at the reader; nil, having read nothing, when the value is not a string.
    package mutating func string() throws(JSONParseError) -> String? {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { return nil }
        return try parseString()
    }

    /// The integer at the reader (no fraction or exponent, at most 18 digits); nil, having read
    /// nothing, when the value is anything else (``value()`` reads it).
    package mutating func integer() throws(JSONParseError) -> Int64? {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "-") || bytes[index] &- UInt8(ascii: "0") < 10 else { return nil }
        let start = index
        if case .integer(let value) = try parseNumber() { return value }
        index = start
        return nil
    }

    /// The array at the reader, its elements; nil, having read nothing, when the value is not an
    /// array.
    package mutating func array() throws(JSONParseError) -> [JSONValue]? {
        guard index < bytes.count, bytes[index] == UInt8(ascii: "[") else { return nil }
        return try parseElements()
    }

    package static func parse(_ text: String) throws(JSONParseError) -> JSONValue {
        var text = text
        let result: Result<JSONValue, JSONParseError> = text.withUTF8 { bytes in
            do throws(JSONParseError) { return .success(try parse(UnsafeRawBufferPointer(bytes))) } catch { return .failure(error) }
        }
        return try result.get()
    }

    private func failure(_ what: String) -> JSONParseError {
        JSONParseError(reason: what, offset: index)
    }

    @inline(__always)
    private mutating func skipWhitespace() {
        // Most JSON a protocol sends has none: one look, in locals.
        guard index < bytes.count, Self.isWhitespace(bytes[index]) else { return }
        var at = index &+ 1
        while at < bytes.count, Self.isWhitespace(bytes[at]) { at &+= 1 }
        index = at
    }

    @inline(__always)
    private static func isWhitespace(_ byte: UInt8) -> Bool {
        byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
    }

    private mutating func parseValue() throws(JSONParseError) -> JSONValue {
        guard index < bytes.count else { throw failure("unexpected end of JSON") }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "t"): try expect("true"); return .bool(true)
        case UInt8(ascii: "f"): try expect("false"); return .bool(false)
        case UInt8(ascii: "n"): try expect("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        default: throw failure("unexpected character")
        }
    }

    private mutating func expect(_ literal: StaticString) throws(JSONParseError) {
        let count = literal.utf8CodeUnitCount
        guard index + count <= bytes.count else { throw failure("unexpected end of JSON") }
        let base = literal.utf8Start
        for offset in 0..<count where bytes[index + offset] != base[offset] {
            throw failure("invalid literal")
        }
        index += count
    }

    private mutating func enter() throws(JSONParseError) {
        depth += 1
        if depth > Self.maxDepth { throw failure("JSON nested deeper than \(Self.maxDepth)") }
    }

    private mutating func parseArray() throws(JSONParseError) -> JSONValue {
        .array(try parseElements())
    }

    /// An array's elements (the reader is at its `[`).
    private mutating func parseElements() throws(JSONParseError) -> [JSONValue] {
        try enter()
        defer { depth -= 1 }
        index += 1
        var elements: [JSONValue] = []
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "]") {
            index += 1
            return elements
        }
        // Room for a few elements at once: growing from empty took a malloc at 1, 2 and 4 elements.
        elements.reserveCapacity(Self.initialCapacity)
        while true {
            skipWhitespace()
            elements.append(try parseValue())
            skipWhitespace()
            guard index < bytes.count else { throw failure("unterminated array") }
            let byte = bytes[index]
            index += 1
            if byte == UInt8(ascii: "]") { return elements }
            guard byte == UInt8(ascii: ",") else { throw failure("expected ',' or ']'") }
        }
    }

    private mutating func parseObject() throws(JSONParseError) -> JSONValue {
        // Keys and values each start with room for a few members (no hash table below 16).
        var members = OrderedDictionary<String, JSONValue>()
        try parseMembers { key, value in
            if members.isEmpty { members.reserveCapacity(Self.initialCapacity) }
            members[String(decoding: key, as: UTF8.self)] = value
        }
        return .object(members)
    }

    /// An object's members, each handed over as it is read (the reader is at its `{`), the key as
    /// its UTF-8, unescaped: a reader that knows its keys compares bytes and makes no string.
    private mutating func parseMembers(_ member: (UnsafeRawBufferPointer, JSONValue) -> Void) throws(JSONParseError) {
        try parseMembers { (key, reader) throws(JSONParseError) in member(key, try reader.parseValue()) }
    }

    /// ``parseMembers(_:)`` with `member` reading each value (``parseMembers(_:reading:)``).
    private mutating func parseMembers(reading member: (UnsafeRawBufferPointer, inout JSONReader) throws(JSONParseError) -> Void) throws(JSONParseError) {
        try enter()
        defer { depth -= 1 }
        index += 1
        skipWhitespace()
        if index < bytes.count && bytes[index] == UInt8(ascii: "}") {
            index += 1
            return
        }
        while true {
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else { throw failure("expected a member name") }
            if let key = try plainString() {
                try colon()
                try readMember(UnsafeRawBufferPointer(rebasing: bytes[key]), member)
            } else {
                try escapedMember(member)
            }
            skipWhitespace()
            guard index < bytes.count else { throw failure("unterminated object") }
            let byte = bytes[index]
            index += 1
            if byte == UInt8(ascii: "}") { return }
            guard byte == UInt8(ascii: ",") else { throw failure("expected ',' or '}'") }
        }
    }

    /// The `:` after a member's name, and the whitespace around it.
    private mutating func colon() throws(JSONParseError) {
        skipWhitespace()
        guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw failure("expected ':'") }
        index += 1
        skipWhitespace()
    }

    /// Hands the reader, at a member's value, to `member`; reads the value if `member` did not.
    @inline(__always)
    private mutating func readMember(
        _ key: UnsafeRawBufferPointer, _ member: (UnsafeRawBufferPointer, inout JSONReader) throws(JSONParseError) -> Void
    ) throws(JSONParseError) {
        let start = index
        try member(key, &self)
        if index == start { _ = try parseValue() }
    }

    /// A member whose name has an escape (apart from the common path).
    @inline(never)
    private mutating func escapedMember(_ member: (UnsafeRawBufferPointer, inout JSONReader) throws(JSONParseError) -> Void) throws(JSONParseError) {
        let key = try unescapedString()
        try colon()
        var failure: JSONParseError?
        key.withUnsafeBytes { key in
            do throws(JSONParseError) { try readMember(key, member) } catch { failure = error }
        }
        if let failure { throw failure }
    }

    private mutating func parseString() throws(JSONParseError) -> String {
        guard let range = try plainString() else { return String(decoding: try unescapedString(), as: UTF8.self) }
        let input = UnsafeRawBufferPointer(rebasing: bytes[range])
        if let known, Self.equal(known, input) { return known }
        return String(decoding: input, as: UTF8.self)
    }

    /// Whether `string`'s UTF-8 is `bytes`.
    private static func equal(_ string: String, _ bytes: UnsafeRawBufferPointer) -> Bool {
        guard string.utf8.count == bytes.count else { return false }
        return string.utf8.withContiguousStorageIfAvailable { utf8 in
            bytes.isEmpty || memcmp(utf8.baseAddress.unsafelyUnwrapped, bytes.baseAddress.unsafelyUnwrapped, bytes.count) == 0
        } ?? bytes.elementsEqual(string.utf8)
    }

    /// The string at the reader (at its opening quote) when it has no escape: where its bytes are
    /// in the input, the reader moved past its closing quote. Nil when it has an escape, the
    /// reader left where it was, for ``unescapedString()``. (The common case, in locals and apart
    /// from the escapes' code.)
    @inline(__always)
    private mutating func plainString() throws(JSONParseError) -> Range<Int>? {
        let start = index &+ 1
        // The opening quote was read, so there is a base address.
        let base = bytes.baseAddress.unsafelyUnwrapped
        let count = bytes.count
        var at = start
        while at < count {
            let byte = base.load(fromByteOffset: at, as: UInt8.self)
            if byte == UInt8(ascii: "\"") {
                index = at &+ 1
                return start..<at
            }
            if byte == UInt8(ascii: "\\") { return nil }
            if byte < 0x20 {
                index = at
                throw failure("control character in string")
            }
            at &+= 1
        }
        index = at
        throw failure("unterminated string")
    }

    /// The string at the reader (at its opening quote), unescaped.
    @inline(never)
    private mutating func unescapedString() throws(JSONParseError) -> [UInt8] {
        index += 1
        var scratch: [UInt8] = []
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            switch byte {
            case UInt8(ascii: "\""):
                return scratch
            case UInt8(ascii: "\\"):
                guard index < bytes.count else { throw failure("unterminated escape") }
                let escape = bytes[index]
                index += 1
                switch escape {
                case UInt8(ascii: "\""): scratch.append(UInt8(ascii: "\""))
                case UInt8(ascii: "\\"): scratch.append(UInt8(ascii: "\\"))
                case UInt8(ascii: "/"): scratch.append(UInt8(ascii: "/"))
                case UInt8(ascii: "b"): scratch.append(0x08)
                case UInt8(ascii: "f"): scratch.append(0x0C)
                case UInt8(ascii: "n"): scratch.append(0x0A)
                case UInt8(ascii: "r"): scratch.append(0x0D)
                case UInt8(ascii: "t"): scratch.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try parseHex4()
                    if (0xD800..<0xDC00).contains(scalar) {
                        // A high surrogate must be followed by an escaped low surrogate; a lone one
                        // becomes U+FFFD, as a JavaScript string would show it.
                        if index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") {
                            index += 2
                            let low = try parseHex4()
                            if (0xDC00..<0xE000).contains(low) {
                                scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                            } else {
                                appendScalar(0xFFFD, to: &scratch)
                                scalar = low
                            }
                        } else {
                            scalar = 0xFFFD
                        }
                    } else if (0xDC00..<0xE000).contains(scalar) {
                        scalar = 0xFFFD
                    }
                    appendScalar(scalar, to: &scratch)
                default: throw failure("invalid escape")
                }
            default:
                if byte < 0x20 { throw failure("control character in string") }
                scratch.append(byte)
            }
        }
        throw failure("unterminated string")
    }

    private mutating func parseHex4() throws(JSONParseError) -> UInt32 {
        guard index + 4 <= bytes.count else { throw failure("short \\u escape") }
        var value: UInt32 = 0
        for _ in 0..<4 {
            let byte = bytes[index]
            index += 1
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: throw failure("invalid \\u escape")
            }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    private func appendScalar(_ value: UInt32, to out: inout [UInt8]) {
        let scalar = Unicode.Scalar(value) ?? "\u{FFFD}"
        out.append(contentsOf: UTF8.encode(scalar)!)
    }

    /// A number: an integer token (no fraction, no exponent) exactly, as `Int64` or, above its
    /// range, `UInt64`; anything else, and integers beyond both ranges, as a `Double`. `-0` is the
    /// double -0.0 (no integer holds its sign).
    private mutating func parseNumber() throws(JSONParseError) -> JSONValue {
        let start = index
        var negative = false
        if bytes[index] == UInt8(ascii: "-") {
            negative = true
            index += 1
        }
        guard index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) else {
            throw failure("invalid number")
        }
        var integer: Int64 = 0
        var digits = 0
        if bytes[index] == UInt8(ascii: "0") {
            index += 1
            digits = 1
        } else {
            // Locals, not the reader's properties, in the loop every number takes; the first 18
            // digits (which an Int64 always holds) in a loop of their own, with no count to check.
            let base = bytes.baseAddress.unsafelyUnwrapped
            let count = bytes.count
            let first = index
            var at = first
            let accumulated = min(count, first &+ 18)
            while at < accumulated {
                let digit = base.load(fromByteOffset: at, as: UInt8.self) &- UInt8(ascii: "0")
                guard digit < 10 else { break }
                integer = integer &* 10 &+ Int64(digit)
                at &+= 1
            }
            if at == accumulated {
                while at < count, base.load(fromByteOffset: at, as: UInt8.self) &- UInt8(ascii: "0") < 10 { at &+= 1 }
            }
            digits = at &- first
            index = at
        }
        var isInteger = true
        if index < bytes.count && bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            let fractionStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            if index == fractionStart { throw failure("invalid number") }
        }
        if index < bytes.count && (bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E")) {
            isInteger = false
            index += 1
            if index < bytes.count && (bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-")) { index += 1 }
            let exponentStart = index
            while index < bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(bytes[index]) { index += 1 }
            if index == exponentStart { throw failure("invalid number") }
        }
        if isInteger && digits <= 18 {
            if integer == 0 && negative { return .number(-0.0) }
            return .integer(negative ? -integer : integer)
        }
        return try number(from: start, isInteger: isInteger)
    }

    /// A number too long for the fast path, or with a fraction or an exponent: read from its text
    /// (apart, so the common path carries none of this).
    @inline(never)
    private func number(from start: Int, isInteger: Bool) throws(JSONParseError) -> JSONValue {
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        if isInteger {
            if let exact = Int64(text) { return .integer(exact) }
            if let exact = UInt64(text) { return .unsignedInteger(exact) }
        }
        guard let value = Double(text) else { throw failure("invalid number") }
        return .number(value)
    }
}
