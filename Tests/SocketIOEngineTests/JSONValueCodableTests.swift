import Foundation
import RealtimeCore
import SocketIOEngine
import Testing

/// The typed-payload helpers: `Codable` values in and out of `JSONValue`, and `JSONValue` itself as
/// a `Codable` value inside the application's own types.
struct JSONValueCodableTests {
    struct Message: Codable, Equatable {
        var text: String
        var count: Int
        var ratio: Double
        var tags: [String]
        var reply: Reply?
        struct Reply: Codable, Equatable { var accepted: Bool }
    }

    @Test func encodableRoundTripKeepsEveryField() throws {
        let message = Message(text: "héllo \"quoted\" ✓", count: 42, ratio: 0.25, tags: ["a", "b"], reply: .init(accepted: true))
        let value = try JSONValue(encoding: message)
        #expect(value["text"] == "héllo \"quoted\" ✓")
        #expect(value["count"] == 42)
        #expect(value["reply"]?["accepted"] == true)
        #expect(try value.decode(Message.self) == message)
    }

    @Test func aValueFromTheWireDecodesIntoAType() throws {
        let wire = try JSONValue(parsing: #"{"count":3,"ratio":1.5,"tags":[],"text":"x","extra":null}"#)
        #expect(try wire.decode(Message.self) == Message(text: "x", count: 3, ratio: 1.5, tags: [], reply: nil))
    }

    @Test func aMismatchedShapeThrowsDecodingError() throws {
        let wire: JSONValue = ["text": 1]
        #expect(throws: DecodingError.self) { try wire.decode(Message.self) }
    }

    @Test func binaryValuesRefuseJSONDecoderWithATypedError() throws {
        let value: JSONValue = ["blob": .binary(Data([1, 2, 3]))]
        #expect(throws: JSONParseError.self) { try value.decode([String: String].self) }
    }

    @Test func jsonValueNestsInsideApplicationCodableTypes() throws {
        struct Envelope: Codable, Equatable {
            var kind: String
            var payload: JSONValue
        }
        let envelope = Envelope(kind: "event", payload: ["a": [1, "two", nil, false]])
        let data = try JSONEncoder().encode(envelope)
        #expect(try JSONDecoder().decode(Envelope.self, from: data) == envelope)
    }
}
