@testable import RealtimeCore
import Testing

/// Reading an object's members as the types a protocol expects (`parseMembers(_:reading:)`): each
/// typed read takes its value when the value is of that kind and reads nothing otherwise, so the
/// value is then read as it is; a value the reader leaves unread is skipped; escaped names and
/// nesting read as with the object built whole.
@Suite struct JSONMemberReadingTests {
    /// What the reader saw: each member's name and, by the read that took it, its value.
    private static func read(_ text: String) throws -> [String] {
        var seen: [String] = []
        let bytes = Array(text.utf8)
        let isObject = try bytes.withUnsafeBytes { body in
            try JSONReader.parseMembers(body) { (key, reader) throws(JSONParseError) in
                let name = String(decoding: key, as: UTF8.self)
                switch name {
                case "n":
                    if let value = try reader.integer() { seen.append("n integer \(value)") } else { seen.append("n value \(try reader.value())") }
                case "s":
                    if let value = try reader.string() { seen.append("s string \(value)") } else { seen.append("s value \(try reader.value())") }
                case "a":
                    if let value = try reader.array() { seen.append("a array \(value.count)") } else { seen.append("a value \(try reader.value())") }
                case "skip":
                    seen.append("skip unread")
                default:
                    seen.append("\(name) value \(try reader.value())")
                }
            }
        }
        if !isObject { seen.append("not an object") }
        return seen
    }

    @Test func eachReadTakesItsKind() throws {
        #expect(try Self.read(#"{"n":-12,"s":"tick","a":[1,[2],{"x":3}]}"#) == ["n integer -12", "s string tick", "a array 3"])
    }

    @Test func aValueOfAnotherKindIsLeftForValue() throws {
        #expect(try Self.read(#"{"n":1.5,"s":7,"a":{"b":[]}}"#) == ["n value 1.5", "s value 7", "a value {\"b\":[]}"])
        #expect(try Self.read(#"{"n":"1","s":null,"a":"[]"}"#) == ["n value \"1\"", "s value null", "a value \"[]\""])
        // Past 18 digits, or with an exponent: not an integer read, the number as `value` reads it.
        #expect(try Self.read(#"{"n":1e2}"#) == ["n value 100"])
        #expect(try Self.read(#"{"n":1234567890123456789012}"#).first?.hasPrefix("n value") == true)
    }

    @Test func anUnreadValueIsSkipped() throws {
        #expect(try Self.read(#"{"skip":{"deep":[1,2,{"x":"y"}]},"n":3}"#) == ["skip unread", "n integer 3"])
        #expect(try Self.read(#" { "skip" : "x" , "s" : "y" } "#) == ["skip unread", "s string y"])
    }

    @Test func escapedNamesAndStrings() throws {
        #expect(try Self.read(#"{"\u0073":"a\"b","n\u0000":1}"#) == ["s string a\"b", "n\u{0} value 1"])
    }

    @Test func anythingButAnObjectIsParsedAndReported() throws {
        #expect(try Self.read(#"[1,2]"#) == ["not an object"])
    }

    @Test(arguments: [#"{"n":}"#, #"{"n":1,}"#, #"{"s":"x"#, #"{"a":[1,}"#, #"{"skip":[}"#, #"{"n":1} x"#, #"{"n":-}"#])
    func malformedInputThrows(_ text: String) {
        #expect(throws: JSONParseError.self) { try Self.read(text) }
    }
}
