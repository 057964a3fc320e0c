import Foundation
import RealtimeCore
import Testing

/// Numbers travel exactly: an integer on the wire is an integer in `JSONValue` (the `Int64` range,
/// then `UInt64` above it), other numbers are doubles, and each prints back as it was read.
@Suite struct JSONNumberTests {
    /// The wire text, what it parses to, and the text it prints as.
    @Test(arguments: [
        ("9007199254740993", JSONValue.integer(9_007_199_254_740_993), "9007199254740993"),  // 2^53 + 1
        ("9223372036854775807", .integer(.max), "9223372036854775807"),  // 2^63 - 1
        ("-9223372036854775808", .integer(.min), "-9223372036854775808"),  // -2^63
        ("9223372036854775808", .unsignedInteger(9_223_372_036_854_775_808), "9223372036854775808"),  // 2^63
        ("18446744073709551615", .unsignedInteger(.max), "18446744073709551615"),  // 2^64 - 1
        ("18446744073709551616", .number(18_446_744_073_709_551_616), "1.8446744073709552e+19"),  // 2^64: a double
        ("1e300", .number(1e300), "1e+300"),
        ("-0.0", .number(-0.0), "-0"),
        ("-0", .number(-0.0), "-0"),
        ("0", .integer(0), "0"),
        ("0.1", .number(0.1), "0.1"),
        ("1.5e-7", .number(1.5e-7), "1.5e-07"),
        ("12345678901234567890123", .number(1.2345678901234568e22), "1.2345678901234568e+22"),
    ])
    func parsesAndPrintsExactly(_ text: String, _ value: JSONValue, _ printed: String) throws {
        let parsed = try JSONValue(parsing: text)
        #expect(parsed == value)
        #expect(String(describing: Mirror(reflecting: parsed).children.first?.label) == String(describing: Mirror(reflecting: value).children.first?.label),
                "the same case: \(parsed) vs \(value)")
        #expect(parsed.jsonString == printed)
        let again = try JSONValue(parsing: parsed.jsonString)
        #expect(again == parsed)
        if case .number(let double) = value { #expect(again.doubleValue?.sign == double.sign, "-0.0 keeps its sign") }
    }

    @Test func integersAreExactInEveryAccessor() throws {
        let big = try JSONValue(parsing: "[9007199254740993, 18446744073709551615, -9223372036854775808, 3.0]")
        #expect(big[0]?.int64Value == 9_007_199_254_740_993)
        #expect(big[0]?.intValue == 9_007_199_254_740_993)
        #expect(big[0]?.uint64Value == 9_007_199_254_740_993)
        #expect(big[1]?.uint64Value == .max)
        #expect(big[1]?.int64Value == nil)
        #expect(big[2]?.int64Value == .min)
        #expect(big[2]?.uint64Value == nil)
        #expect(big[3]?.int64Value == 3, "an integral double reads as an integer")
        #expect(try JSONValue(parsing: "3.5").int64Value == nil)
    }

    /// The cases compare and hash by value: `.integer(1) == .number(1)`, but 2^53 + 1 is not the
    /// double nearest to it.
    @Test func casesCompareByValue() {
        #expect(JSONValue.integer(1) == .number(1))
        #expect(JSONValue.unsignedInteger(5) == .integer(5))
        #expect(JSONValue.integer(9_007_199_254_740_993) != .number(9_007_199_254_740_992))
        #expect(JSONValue.unsignedInteger(.max) != .number(18_446_744_073_709_551_616))  // 2^64, the double nearest to UInt64.max
        #expect(Set<JSONValue>([.integer(1), .number(1), .unsignedInteger(1)]).count == 1)
        #expect(JSONValue.number(-0.0) == .integer(0))
        #expect(JSONValue(integerLiteral: 42) == .integer(42))
    }

    struct Record: Codable, Equatable {
        var id: Int64
        var big: UInt64
        var count: Int
        var ratio: Double
    }

    /// `Codable` both ways through `JSONEncoder`/`JSONDecoder` keeps every bit.
    @Test func codableFieldsAreExact() throws {
        let record = Record(id: .min, big: .max, count: 9_007_199_254_740_993, ratio: 0.1)
        let value = try JSONValue(encoding: record)
        #expect(value["id"] == .integer(.min))
        #expect(value["big"] == .unsignedInteger(.max))
        #expect(value["count"] == .integer(9_007_199_254_740_993))
        #expect(try value.decode(Record.self) == record)
        let text = #"{"id":9223372036854775807,"big":18446744073709551615,"count":-9007199254740993,"ratio":1e300}"#
        let decoded = try JSONValue(parsing: text).decode(Record.self)
        #expect(decoded == Record(id: .max, big: .max, count: -9_007_199_254_740_993, ratio: 1e300))
        // JSONValue itself as a Codable member.
        let wrapped = try JSONDecoder().decode([JSONValue].self, from: Data("[18446744073709551615, 9223372036854775807, 0.5]".utf8))
        #expect(wrapped == [.unsignedInteger(.max), .integer(.max), .number(0.5)])
        #expect(String(decoding: try JSONEncoder().encode(wrapped), as: UTF8.self) == "[18446744073709551615,9223372036854775807,0.5]")
    }
}
