import Foundation
import OrderedCollections
import RealtimeCore
import RealtimeTesting
@testable import SignalRHub
import Testing

/// Typed arguments, items and results are decoded straight from the `JSONValue`
/// (`HubValueDecoder`). These tests hold it to what it replaced, the value written as JSON text and
/// read by `JSONDecoder` (`HubValueCoding.decodeThroughJSONText`): the same value, or the same kind
/// of `DecodingError` at the same coding path, for hand-picked and for seeded random inputs.
@Suite("Typed values: HubValueDecoder agrees with JSONDecoder")
struct HubValueDecoderTests {
    enum Mood: String, Codable, Equatable { case calm, busy }

    enum Shape: Codable, Equatable {
        case circle(radius: Double)
        case square(Int)
        case none
    }

    struct Inner: Codable, Equatable {
        var name: String
        var tags: [String]
    }

    struct Everything: Codable, Equatable {
        var id: Int
        var small: Int8
        var unsigned: UInt32
        var ratio: Double
        var single: Float
        var flag: Bool
        var text: String
        var optional: Int?
        var inner: Inner
        var list: [Inner]
        var byName: [String: Int]
        var byNumber: [Int: String]
        var when: Date
        var bytes: Data
        var link: URL
        var amount: Decimal
        var mood: Mood
        var shape: Shape
        var raw: JSONValue
        var set: Set<Int>
    }

    static let everything: JSONValue = [
        "id": 42, "small": -7, "unsigned": 4_000_000_000, "ratio": 0.1, "single": 1.5, "flag": true,
        "text": "grüße", "optional": nil,
        "inner": ["name": "a", "tags": ["x", "y"]],
        "list": [["name": "b", "tags": []], ["name": "c", "tags": ["z"]]],
        "byName": ["one": 1, "two": 2], "byNumber": ["1": "one", "20": "twenty"],
        "when": "2026-11-24T10:20:30.250Z", "bytes": "AQID", "link": "https://example.com/a?b=c",
        "amount": 12.75, "mood": "busy", "shape": ["circle": ["radius": 2.5]],
        "raw": ["z": 1, "a": [true, nil]], "set": [3, 1, 2],
    ]

    /// What happened when decoding: the value, or the error's kind and coding path.
    enum Outcome<T: Equatable>: Equatable, CustomStringConvertible {
        case value(T)
        case failure(kind: String, path: [String])

        init(_ body: () throws -> T) {
            do { self = .value(try body()) } catch let error as DecodingError {
                switch error {
                case .typeMismatch(_, let context): self = .failure(kind: "typeMismatch", path: context.codingPath.map(\.pathName))
                case .valueNotFound(_, let context): self = .failure(kind: "valueNotFound", path: context.codingPath.map(\.pathName))
                case .keyNotFound(let key, let context): self = .failure(kind: "keyNotFound", path: (context.codingPath + [key]).map(\.pathName))
                case .dataCorrupted(let context): self = .failure(kind: "dataCorrupted", path: context.codingPath.map(\.pathName))
                @unknown default: self = .failure(kind: "unknown", path: [])
                }
            } catch {
                self = .failure(kind: "other: \(error)", path: [])
            }
        }

        var description: String {
            switch self {
            case .value(let value): "value \(value)"
            case .failure(let kind, let path): "\(kind) at \(path)"
            }
        }
    }

    /// Both give the same value, or both fail. Failures have the same kind and path, with two
    /// exceptions where JSONDecoder's answer is not a rule: with two or more members in one object,
    /// which wrong member is reported first depends on its key order (a Swift Dictionary's, random
    /// per process; ours is wire order), and a number out of range (`dataCorrupted`) comes with an
    /// empty coding path from JSONDecoder on Linux, where ours names the member.
    func agree<T: Decodable & Equatable>(_ value: JSONValue, as type: T.Type, _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation) {
        let direct = Outcome { try HubValueDecoder.decode(T.self, from: value) }
        let throughText = Outcome { try HubValueCoding.decodeThroughJSONText(value, as: T.self) }
        switch (direct, throughText) {
        case (.failure(let kind, _), .failure(let otherKind, _)) where Self.hasWideObject(value):
            #expect(kind.hasPrefix("other") == otherKind.hasPrefix("other"), "\(value.jsonString) as \(T.self)", sourceLocation: sourceLocation)
        case (.failure("dataCorrupted", _), .failure("dataCorrupted", _)):
            break
        default:
            #expect(direct == throughText, "\(value.jsonString) as \(T.self)", sourceLocation: sourceLocation)
        }
    }

    static func hasWideObject(_ value: JSONValue) -> Bool {
        switch value {
        case .object(let members): members.count > 1 || members.values.contains(where: hasWideObject)
        case .array(let elements): elements.contains(where: hasWideObject)
        default: false
        }
    }

    @Test("A struct with every kind of member decodes to the same value both ways")
    func everythingAgrees() throws {
        let decoded = try HubValueDecoder.decode(Everything.self, from: Self.everything)
        #expect(decoded.byNumber == [1: "one", 20: "twenty"])
        #expect(decoded.shape == .circle(radius: 2.5))
        #expect(decoded.when == Date(timeIntervalSince1970: 1_795_515_630.25))
        // A JSONValue member is taken as it is (the text path sorted its keys).
        #expect(decoded.raw.jsonString == #"{"z":1,"a":[true,null]}"#)
        var expected = decoded
        expected.raw = try HubValueCoding.decodeThroughJSONText(Self.everything, as: Everything.self).raw
        #expect(try HubValueCoding.decodeThroughJSONText(Self.everything, as: Everything.self) == expected)
        // Binary where a string is read is its base64 text, as it was on the text path.
        let binary: JSONValue = ["name": .binary(Data([1, 2, 3])), "tags": [.binary(Data([255]))]]
        #expect(try HubValueDecoder.decode(Inner.self, from: binary) == Inner(name: "AQID", tags: ["/w=="]))
        agree(binary, as: Inner.self)
    }

    @Test("Each wrong member fails with the same kind of DecodingError at the same path")
    func failuresAgree() {
        let changes: [(String, JSONValue?)] = [
            ("id", 1.5), ("id", "1"), ("id", nil), ("id", .null), ("small", 128), ("small", -129), ("unsigned", -1),
            ("unsigned", 4_294_967_296), ("ratio", "x"), ("single", 1e39), ("flag", 1), ("text", 5), ("optional", "no"),
            ("inner", []), ("inner", .null), ("inner", ["name": "a"]), ("list", [["name": 1, "tags": []]]),
            ("byName", ["one": "1"]), ("byNumber", ["x": "y"]), ("when", "yesterday"), ("when", 5), ("bytes", "%%%"),
            ("bytes", 1), ("link", 3), ("amount", "1"), ("mood", "sad"), ("shape", ["triangle": [:]]),
            ("shape", ["square": ["_0": "x"]]), ("set", [1, "2"]), ("list", .null), ("list", [.null]),
        ]
        for (key, replacement) in changes {
            guard case .object(var members) = Self.everything else { return }
            if let replacement { members[key] = replacement } else { members.removeValue(forKey: key) }
            agree(.object(members), as: Everything.self, "\(key)")
        }
        for top: JSONValue in [.null, 1, "x", [], [:], .binary(Data([1]))] {
            agree(top, as: Everything.self)
            agree(top, as: [Int].self)
            agree(top, as: [String: Int].self)
            agree(top, as: Int?.self)
            agree(top, as: Date.self)
            agree(top, as: Data.self)
        }
    }

    /// A random JSON value up to three levels deep, from scalars chosen near the edges of the types
    /// the tests read (ranges, precision, base64, dates, enum cases) and keys the test types use.
    static func randomValue(_ random: inout SplitMix64, depth: Int = 0) -> JSONValue {
        guard depth < 3, Int.random(in: 0..<3, using: &random) == 0 else {
            switch Int.random(in: 0..<9, using: &random) {
            case 0: return .null
            case 1: return .bool(Bool.random(using: &random))
            case 2: return .number(Double(Int.random(in: -300...300, using: &random)))
            case 3: return .number(Double.random(in: -1e6...1e6, using: &random))
            case 4: return .number([1e39, -1e39, 1e38, 4_294_967_296, 9_007_199_254_740_992, 0.1, -0.0, 255, 256, 1e-50, 1e-30].randomElement(using: &random)!)
            case 5: return .string(["a", "b", "1", "calm", "busy", "2026-11-24T10:20:30Z", "AQID", "", "é", "\u{0}\"\\"].randomElement(using: &random)!)
            case 6: return .binary(Data((0..<Int.random(in: 0..<4, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }))
            case 7: return .string(String(Int.random(in: -5...5, using: &random)))
            default: return .number(Double(Int.random(in: 0...3, using: &random)))
            }
        }
        let count = Int.random(in: 0..<4, using: &random)
        if Bool.random(using: &random) { return .array((0..<count).map { _ in randomValue(&random, depth: depth + 1) }) }
        let keys = ["name", "tags", "1", "x", "calm", "radius", "circle", "square", "_0"]
        var members = OrderedDictionary<String, JSONValue>()
        for _ in 0..<count { members[keys.randomElement(using: &random)!] = randomValue(&random, depth: depth + 1) }
        return .object(members)
    }

    /// 3,000 seeded random values, each read as several types: both ways give the same outcome.
    @Test("Seeded random values read as several types: the same outcome both ways")
    func randomValuesAgree() {
        var random = SplitMix64(seed: 0x4875_6256_616c)
        for _ in 0..<3_000 {
            let input = Self.randomValue(&random)
            agree(input, as: Inner.self)
            agree(input, as: [Int].self)
            agree(input, as: [Int8?].self)
            agree(input, as: [String: Double].self)
            agree(input, as: [Int: Bool].self)
            agree(input, as: Shape.self)
            agree(input, as: [Mood].self)
            agree(input, as: Float.self)
            agree(input, as: [UInt16].self)
            agree(input, as: [Data].self)
            agree(input, as: Decimal.self)
            agree(input, as: String?.self)
        }
    }
}

private extension CodingKey {
    /// A path element as both decoders name it: the index for arrays, the key for objects.
    var pathName: String { intValue.map { "#\($0)" } ?? stringValue }
}

@Suite("Typed values: HubValueCoding's fast paths")
struct HubValueCodingFastPathTests {
    /// Optional targets go past the fast paths (a nil there once cast to `Optional<T>.none`).
    @Test("Optional and plain targets decode the value, not nil")
    func optionalTargets() throws {
        #expect(try HubValueCoding.decode(.string("a"), as: String?.self) == "a")
        #expect(try HubValueCoding.decode(.number(5), as: Int?.self) == 5)
        #expect(try HubValueCoding.decode(.null, as: Int?.self) == nil)
        #expect(try HubValueCoding.decode(.number(5), as: Double.self) == 5)
        #expect(try HubValueCoding.decode(.binary(Data([1])), as: Data?.self) == Data([1]))
        #expect(throws: DecodingError.self) { try HubValueCoding.decode(.string("a"), as: Int?.self) }
        #expect(throws: DecodingError.self) { try HubValueCoding.decode(.number(1.5), as: Int.self) }
    }

    /// The encode side's fast paths give what `HubValueEncoder` gives: a non-finite Double fails as
    /// it does inside a struct (the fast path once sent it as a number JSON cannot carry).
    @Test("Top-level arguments encode as they would inside a value; non-finite numbers fail")
    func encodeFastPaths() throws {
        #expect(try HubValueCoding.encode("a") == .string("a"))
        #expect(try HubValueCoding.encode(true) == .bool(true))
        #expect(try HubValueCoding.encode(7) == .number(7))
        #expect(try HubValueCoding.encode(0.5) == .number(0.5))
        #expect(try HubValueCoding.encode(Int?.some(3)) == .number(3))
        #expect(try HubValueCoding.encode(Int?.none) == .null)
        #expect(try HubValueCoding.encode(Data([1, 2])) == .binary(Data([1, 2])))
        #expect(try HubValueCoding.encode([UInt8]([1, 2])) == .binary(Data([1, 2])))
        let ordered: JSONValue = ["z": 1, "a": 2]
        #expect(try HubValueCoding.encode(ordered).jsonString == #"{"z":1,"a":2}"#)
        for value in [Double.nan, .infinity, -.infinity] {
            #expect(throws: EncodingError.self) { try HubValueCoding.encode(value) }
            #expect(throws: EncodingError.self) { try HubValueCoding.encode(Double?.some(value)) }
            #expect(throws: EncodingError.self) { try HubValueCoding.encode([value]) }
        }
    }
}

@Suite("Typed values: 64-bit integers are exact")
struct HubValueExactIntegerTests {
    struct Ids: Codable, Equatable {
        var long: Int64
        var unsigned: UInt64
        var plain: Int
        var small: Int32
    }

    /// Hub arguments, results and stream items decode into integer fields with every bit, and
    /// encode back the same, above 2^53 too.
    @Test("Int64, UInt64 and Int fields decode and encode exactly")
    func exactFields() throws {
        let value: JSONValue = [
            "long": .integer(.min), "unsigned": .unsignedInteger(.max), "plain": .integer(9_007_199_254_740_993), "small": .integer(-7),
        ]
        let ids = try HubValueCoding.decode(value, as: Ids.self)
        #expect(ids == Ids(long: .min, unsigned: .max, plain: 9_007_199_254_740_993, small: -7))
        #expect(try HubValueCoding.encode(ids) == value)
        #expect(try HubValueCoding.encode(ids)["unsigned"] == .unsignedInteger(.max))
        #expect(try HubValueCoding.decode(.integer(9_007_199_254_740_993), as: Int.self) == 9_007_199_254_740_993)
        #expect(try HubValueCoding.decode(.unsignedInteger(.max), as: UInt64.self) == .max)
        #expect(try HubValueCoding.encode(Int64.max) == .integer(.max))
        #expect(try HubValueCoding.encode(UInt64.max) == .unsignedInteger(.max))
        // Out of range is an error, never a rounded value.
        #expect(throws: DecodingError.self) { try HubValueCoding.decode(.unsignedInteger(.max), as: Int64.self) }
        #expect(throws: DecodingError.self) { try HubValueCoding.decode(.integer(-1), as: UInt64.self) }
        #expect(throws: DecodingError.self) { try HubValueCoding.decode(.integer(1 << 40), as: Int32.self) }
    }

    /// Through the JSON hub protocol's text: a `long` a .NET hub returns keeps its last digit.
    @Test("Through the JSON hub protocol's text")
    func throughJSONText() throws {
        let parsed = try JSONValue(parsing: #"{"long":-9223372036854775808,"unsigned":18446744073709551615,"plain":9007199254740993,"small":1}"#)
        #expect(try HubValueCoding.decode(parsed, as: Ids.self) == Ids(long: .min, unsigned: .max, plain: 9_007_199_254_740_993, small: 1))
    }
}
