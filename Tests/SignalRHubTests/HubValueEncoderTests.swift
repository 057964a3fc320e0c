import Foundation
import OrderedCollections
import RealtimeCore
import RealtimeTesting
@testable import SignalRHub
import Testing

/// Typed arguments, client results and upload items are encoded straight into a `JSONValue`
/// (`HubValueEncoder`). These tests hold it to what it replaced, `JSONEncoder`'s text read back
/// (`HubValueCoding.encodeThroughJSONText`): the same value (objects compared as JSON objects, binary
/// as its base64 text) or the same `EncodingError` at the same coding path, for hand-picked values
/// and for the values seeded random inputs decode to. Then the two things the text path could not
/// do: members in declaration order, and `Data` as MessagePack `bin` wherever it is.
@Suite("Typed values: HubValueEncoder agrees with JSONEncoder")
struct HubValueEncoderTests {
    typealias Everything = HubValueDecoderTests.Everything
    typealias Inner = HubValueDecoderTests.Inner
    typealias Shape = HubValueDecoderTests.Shape
    typealias Mood = HubValueDecoderTests.Mood

    /// What happened when encoding: the value (binary as base64 text), or the error and its path.
    enum Outcome: Equatable, CustomStringConvertible {
        case value(JSONValue)
        case failure(String)

        init(_ body: () throws -> JSONValue) {
            do { self = .value(try body().base64EncodingBinary()) } catch EncodingError.invalidValue(_, let context) {
                self = .failure("invalidValue at \(context.codingPath.map { $0.intValue.map { "#\($0)" } ?? $0.stringValue })")
            } catch {
                self = .failure("other: \(error)")
            }
        }

        var description: String {
            switch self {
            case .value(let value): "value \(value.jsonString)"
            case .failure(let text): text
            }
        }
    }

    func agree<T: Encodable>(_ value: T, _ comment: Comment? = nil, sourceLocation: SourceLocation = #_sourceLocation) {
        let direct = Outcome { try HubValueEncoder.encode(value) }
        let throughText = Outcome { try HubValueCoding.encodeThroughJSONText(value) }
        #expect(direct == throughText, "\(T.self): \(comment?.rawValue ?? "")", sourceLocation: sourceLocation)
    }

    static var everything: Everything {
        get throws { try HubValueDecoder.decode(Everything.self, from: HubValueDecoderTests.everything) }
    }

    @Test("A struct with every kind of member encodes to the same value both ways")
    func everythingAgrees() throws {
        let value = try Self.everything
        agree(value)
        let encoded = try HubValueEncoder.encode(value)
        #expect(try HubValueDecoder.decode(Everything.self, from: encoded) == value)
        // Float and Decimal are the numbers their text names, as JSONEncoder writes them.
        #expect(try HubValueEncoder.encode(Float(0.1)) == .number(0.1))
        #expect(try HubValueEncoder.encode([Decimal(string: "12.75")!]) == [12.75])
        agree([Float(0.1), 1e-7, 3.4e38, -0.0])
        agree(["when": Date(timeIntervalSince1970: 1_795_515_630.25), "whole": Date(timeIntervalSince1970: 1_795_515_630)])
        agree([URL(string: "https://example.com/a?b=c")!, URL(string: "relative/path", relativeTo: URL(string: "https://example.com/base/"))!])
        agree(["a": nil, "b": 1] as [String: Int?])
        agree([Int64.max, Int64.min, 9_007_199_254_740_993])
        agree([UInt64.max])
        agree(Optional<Int>.none)
    }

    @Test("Non-finite numbers fail with the same EncodingError at the same path")
    func failuresAgree() {
        struct Holder: Encodable {
            var list: [Double]
            var inner: [String: Float]
        }
        agree(Double.nan)
        agree([1, Double.infinity])
        agree(Holder(list: [1, 2, -.infinity], inner: [:]))
        agree(Holder(list: [], inner: ["x": .nan]))
        agree([[Float.infinity]])
        #expect(throws: EncodingError.self) { try HubValueEncoder.encode([Decimal.nan]) }
    }

    /// Encoders a type may drive by hand: nothing at all, a nested value that writes nothing,
    /// superEncoder, containers asked for twice, single values of every kind.
    @Test("Hand-written encode(to:) methods give the same value both ways")
    func handWrittenEncoders() {
        struct Nothing: Encodable { func encode(to encoder: any Encoder) throws {} }
        struct HoldsNothing: Encodable { var nothing = Nothing(); var list = [Nothing()] }
        class Base: Encodable {
            var base = 1
            func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: Keys.self)
                try container.encode(base, forKey: .base)
            }
            enum Keys: CodingKey { case base, own, parent }
        }
        final class Derived: Base {
            override func encode(to encoder: any Encoder) throws {
                var container = encoder.container(keyedBy: Keys.self)
                try container.encode("own", forKey: .own)
                try super.encode(to: container.superEncoder())
                try super.encode(to: container.superEncoder(forKey: .parent))
                var list = encoder.container(keyedBy: Keys.self)
                try list.encode(2, forKey: .base)
            }
        }
        struct InList: Encodable {
            func encode(to encoder: any Encoder) throws {
                var list = encoder.unkeyedContainer()
                try list.encode(1)
                try Base().encode(to: list.superEncoder())
                var nested = list.nestedContainer(keyedBy: Base.Keys.self)
                try nested.encode(true, forKey: .own)
                var deeper = nested.nestedUnkeyedContainer(forKey: .parent)
                try deeper.encodeNil()
                try deeper.encode(UInt8(7))
                var inner = list.nestedUnkeyedContainer()
                try inner.encode("x")
                try list.encode(Nothing())
            }
        }
        struct Single: Encodable {
            let value: JSONValue
            func encode(to encoder: any Encoder) throws {
                var container = encoder.singleValueContainer()
                try container.encode(value)
            }
        }
        agree(Nothing())
        agree(HoldsNothing())
        agree(Derived())
        agree(InList())
        agree([Single(value: ["b": 1, "a": [true, nil]])])
        agree(Set([3, 1, 2]))
        agree([Shape.circle(radius: 2), .square(3), .none])
        agree([Mood.calm: 1])
    }

    /// Seeded random values (`HubValueDecoderTests.randomValue`) decoded as several types; each value
    /// that decodes is encoded both ways.
    @Test("Values decoded from seeded random inputs encode the same both ways")
    func randomValuesAgree() {
        var random = SplitMix64(seed: 0x456e_636f_6465)
        var encoded = 0
        func check<T: Codable>(_ input: JSONValue, as type: T.Type) {
            guard let value = try? HubValueDecoder.decode(T.self, from: input) else { return }
            encoded += 1
            agree(value, "from \(input.jsonString)")
        }
        for _ in 0..<4_000 {
            let input = HubValueDecoderTests.randomValue(&random)
            check(input, as: Inner.self)
            check(input, as: [Int].self)
            check(input, as: [Int8?].self)
            check(input, as: [String: Double].self)
            check(input, as: [Int: Bool].self)
            check(input, as: Shape.self)
            check(input, as: [Mood].self)
            check(input, as: [Float].self)
            check(input, as: [UInt16].self)
            check(input, as: [Data].self)
            check(input, as: Decimal.self)
            check(input, as: [String?].self)
            check(input, as: [String: JSONValue].self)
        }
        // Enough of the inputs decode for the comparison to mean something (3,722 with this seed).
        #expect(encoded > 3_000)
    }

    @Test("Members keep their declaration order; JSONEncoder's text had a Dictionary's order")
    func declarationOrder() throws {
        struct Ordered: Encodable {
            var zulu = 1, yankee = 2, xray = 3, whiskey = 4, victor = 5, uniform = 6, tango = 7, sierra = 8
        }
        let expected = #"{"zulu":1,"yankee":2,"xray":3,"whiskey":4,"victor":5,"uniform":6,"tango":7,"sierra":8}"#
        #expect(try HubValueCoding.encode(Ordered()).jsonString == expected)
        #expect(try HubValueCoding.encode([Ordered()]).jsonString == "[\(expected)]")
    }

    /// `Data` is `.binary` wherever it is: base64 text in JSON as before, `bin` in MessagePack
    /// where the text path gave a `str`.
    @Test("Data members are MessagePack bin and JSON base64")
    func dataMembersAreBinary() throws {
        struct Upload: Encodable { var name = "a"; var bytes = Data([1, 2, 3]) }
        let value = try HubValueCoding.encode(Upload())
        #expect(value == ["name": "a", "bytes": .binary(Data([1, 2, 3]))])
        #expect(value.base64EncodingBinary() == (try HubValueCoding.encodeThroughJSONText(Upload())))
        let message = HubMessage.invocation(HubInvocation(invocationId: nil, target: "Upload", arguments: [value]))
        let packed = HubProtocolCodec(.messagePack).encode(message)
        // "bytes" (fixstr 5) then bin 8 of 3 bytes; the text path gave fixstr 4 "AQID".
        let member: [UInt8] = [0xa5] + Array("bytes".utf8) + [0xc4, 3, 1, 2, 3]
        #expect(packed.indices.contains { packed[$0...].starts(with: member) }, "\(packed)")
        let json = HubProtocolCodec(.json).encode(message)
        #expect(String(decoding: json, as: UTF8.self).contains(#""bytes":"AQID""#))
    }
}
