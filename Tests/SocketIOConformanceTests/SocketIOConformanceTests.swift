import Foundation
import OrderedCollections
import SocketIOEngine
import Testing

/// The wire reference for Socket.IO v5 and Engine.IO v4: every case of `socketio-vectors.json`
/// (encodings produced by socket.io-parser 4.2.6 and engine.io-parser 5.2.3) is encoded and decoded by
/// our codec and must match byte for byte; every input the reference refuses must fail with a typed
/// ``SocketIOParseError`` of the matching kind.
@Suite("Socket.IO conformance vectors")
struct SocketIOConformanceTests {
    struct SocketIOCase: CustomTestStringConvertible, Sendable {
        let packet: SocketIOPacket
        let encoded: String
        let attachments: [Data]
        var testDescription: String { encoded }
    }

    struct DecodeErrorCase: CustomTestStringConvertible, Sendable {
        let input: String
        let error: String
        var testDescription: String { "\(input.debugDescription) -> \(error)" }
    }

    struct EngineIOCase: CustomTestStringConvertible, Sendable {
        enum Kind: Sendable {
            case packet(EngineIOPacket, supportsBinary: Bool, encoded: EngineIOCodec.Encoded)
            case payload([EngineIOPacket], encoded: String)
        }
        let kind: Kind
        var testDescription: String {
            switch kind {
            case .packet(let packet, let binary, _): "packet \(packet.type) binary=\(binary)"
            case .payload(let packets, _): "payload of \(packets.count)"
            }
        }
    }

    /// The vector file, read with Foundation's JSONDecoder (not our parser).
    static let vectors: JSONValue = {
        let url = Bundle.module.url(forResource: "socketio-vectors", withExtension: "json")!
        return try! JSONDecoder().decode(JSONValue.self, from: Data(contentsOf: url))
    }()

    static func hex(_ text: String) -> Data {
        var data = Data()
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            data.append(UInt8(text[index..<next], radix: 16)!)
            index = next
        }
        return data
    }

    /// Replaces the vector file's `{"$bin": hex}` stand-ins with binary values.
    static func value(_ json: JSONValue) -> JSONValue {
        switch json {
        case .array(let elements): return .array(elements.map(value))
        case .object(let members):
            if members.count == 1, let hexText = members["$bin"]?.stringValue { return .binary(hex(hexText)) }
            return .object(members.mapValues(value))
        default: return json
        }
    }

    static let socketIOCases: [SocketIOCase] = vectors["socketio"]!.arrayValue!.map { entry in
        let packet = entry["packet"]!
        return SocketIOCase(
            packet: SocketIOPacket(
                type: SocketIOPacketType(rawValue: UInt8(packet["type"]!.intValue!))!,
                namespace: packet["nsp"]!.stringValue!,
                id: packet["id"]?.intValue,
                data: packet["data"].map(value)),
            encoded: entry["encoded"]!.stringValue!,
            attachments: entry["attachments"]!.arrayValue!.map { hex($0.stringValue!) })
    }

    static let socketIODecodeErrors: [DecodeErrorCase] = vectors["socketioDecodeErrors"]!.arrayValue!.map {
        DecodeErrorCase(input: $0["input"]!.stringValue!, error: $0["error"]!.stringValue!)
    }

    static func engineIOPacket(_ object: JSONValue) -> EngineIOPacket {
        let names = ["open", "close", "ping", "pong", "message", "upgrade", "noop"]
        let type = EngineIOPacketType(rawValue: UInt8(names.firstIndex(of: object["type"]!.stringValue!)!))!
        switch object["data"] {
        case nil: return EngineIOPacket(type)
        case .string(let text): return EngineIOPacket(type, .text(text))
        case let binary?: return EngineIOPacket(type, .binary(hex(binary["$bin"]!.stringValue!)))
        }
    }

    static let engineIOCases: [EngineIOCase] = vectors["engineio"]!.arrayValue!.map { entry in
        if entry["kind"] == "payload" {
            return EngineIOCase(kind: .payload(
                entry["packets"]!.arrayValue!.map(engineIOPacket), encoded: entry["encoded"]!.stringValue!))
        }
        let encoded: EngineIOCodec.Encoded
        if let text = entry["encoded"]?.stringValue { encoded = .text(text) }
        else { encoded = .binary(hex(entry["encoded"]!["$bin"]!.stringValue!)) }
        return EngineIOCase(kind: .packet(
            engineIOPacket(entry["packet"]!), supportsBinary: entry["supportsBinary"]!.boolValue!, encoded: encoded))
    }

    static let engineIODecodeErrors: [String] = vectors["engineioDecodeErrors"]!.arrayValue!.map { $0["input"]!.stringValue! }

    @Test("the vector file holds every case the README counts")
    func counts() {
        #expect(Self.socketIOCases.count == 21)
        #expect(Self.socketIODecodeErrors.count == 16)
        #expect(Self.engineIOCases.count == 15)
        #expect(Self.engineIODecodeErrors.count == 6)
    }

    @Test("Socket.IO encode matches socket.io-parser byte for byte", arguments: socketIOCases)
    func socketIOEncode(_ vector: SocketIOCase) {
        let encoded = SocketIOCodec.encode(vector.packet)
        #expect(encoded.text == vector.encoded)
        #expect(encoded.attachments == vector.attachments)
    }

    @Test("Socket.IO decode gives back the packet, attachments in place", arguments: socketIOCases)
    func socketIODecode(_ vector: SocketIOCase) throws {
        var decoder = SocketIOPacketDecoder()
        var decoded = try decoder.receive(text: vector.encoded)
        for (index, attachment) in vector.attachments.enumerated() {
            #expect(decoded == nil, "the packet must wait for attachment \(index)")
            decoded = try decoder.receive(binary: attachment)
        }
        let packet = try #require(decoded)
        #expect(!decoder.isWaitingForAttachments)
        // The reference reports binary packets with their binary type; the vectors list the type
        // that was encoded.
        var expectedType = vector.packet.type
        if !vector.attachments.isEmpty { expectedType = expectedType == .event ? .binaryEvent : .binaryAck }
        #expect(packet.type == expectedType)
        #expect(packet.namespace == vector.packet.namespace)
        #expect(packet.id == vector.packet.id)
        #expect(packet.data == vector.packet.data)
    }

    @Test("Socket.IO inputs the reference refuses fail with a typed error", arguments: socketIODecodeErrors)
    func socketIODecodeError(_ vector: DecodeErrorCase) {
        var decoder = SocketIOPacketDecoder()
        #expect {
            _ = try decoder.receive(text: vector.input)
        } throws: { error in
            guard let error = error as? SocketIOParseError else { return false }
            switch (error, vector.error) {
            case (.invalidPayload, "invalid payload"), (.illegalAttachments, "Illegal attachments"): return true
            case (.unknownPacketType(let type), let message): return message == "unknown packet type \(type)"
            default: return false
            }
        }
    }

    /// socket.io-parser's `RESERVED_EVENTS`: an EVENT packet naming one is refused. Each name, and
    /// names beside them (a prefix, another case, the same length), decoded as an event.
    @Test("an event named as a reserved event is refused; names beside them are not", arguments: [
        ("connect", true), ("connect_error", true), ("disconnect", true), ("disconnecting", true), ("newListener", true),
        ("removeListener", true), ("Connect", false), ("connect_", false), ("connecx", false), ("disconnectinG", false),
        ("newListenerX", false), ("tick", false), ("", false), ("removeListenex", false),
    ])
    func reservedEventNames(name: String, reserved: Bool) throws {
        #expect(SocketIOPacket.reservedEventNames.contains(name) == reserved)
        var decoder = SocketIOPacketDecoder()
        let text = "2[\"\(name)\",1]"
        if reserved {
            #expect(throws: SocketIOParseError.self) { try decoder.receive(text: text) }
        } else {
            #expect(try decoder.receive(text: text)?.data == [.string(name), 1])
        }
    }

    @Test("Engine.IO packets and payloads match engine.io-parser", arguments: engineIOCases)
    func engineIO(_ vector: EngineIOCase) throws {
        switch vector.kind {
        case .packet(let packet, let supportsBinary, let encoded):
            #expect(EngineIOCodec.encode(packet, supportsBinary: supportsBinary) == encoded)
            switch encoded {
            case .text(let text): #expect(try EngineIOCodec.decode(text: text) == packet)
            case .binary(let data): #expect(EngineIOCodec.decode(binary: data) == packet)
            }
        case .payload(let packets, let encoded):
            #expect(EngineIOCodec.encodePayload(packets) == encoded)
            #expect(try EngineIOCodec.decodePayload(encoded) == packets)
        }
    }

    @Test("Engine.IO inputs the reference refuses fail as packets and as payloads", arguments: engineIODecodeErrors)
    func engineIODecodeError(_ input: String) {
        #expect(throws: SocketIOParseError.self) { try EngineIOCodec.decode(text: input) }
        #expect(throws: SocketIOParseError.self) { try EngineIOCodec.decodePayload(input) }
    }

    @Test("a payload that is not valid UTF-8 is refused")
    func payloadInvalidUTF8() {
        let bytes: [UInt8] = [UInt8(ascii: "4"), 0xC3, 0x28]
        #expect(throws: SocketIOParseError.self) {
            try bytes.withUnsafeBytes { try EngineIOCodec.decodePayload($0) }
        }
    }

    @Test("JSON nested past the limit is refused, not a stack overflow")
    func deepNesting() {
        let text = "2" + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
        var decoder = SocketIOPacketDecoder()
        #expect(throws: SocketIOParseError.self) { _ = try decoder.receive(text: text) }
    }

    /// A binary packet's count is what the client waits for and buffers. socket.io-parser's encoder
    /// writes exactly as many as it left placeholders; a larger count (up to 999,999,999 fits the
    /// nine digits) made the decoder reserve room for all of them at once (found by
    /// Scripts/fuzz.sh: "6262262662-2[]" asked for 4 GB) and would have buffered that many
    /// messages. A count above the placeholders is refused before anything is reserved.
    @Test("a binary packet announcing more attachments than it has placeholders is refused")
    func moreAttachmentsThanPlaceholders() throws {
        for text in ["6262262662-2[]", "5999999999-[\"e\",{\"_placeholder\":true,\"num\":0}]", "52-[\"e\",{\"_placeholder\":true,\"num\":0}]"] {
            var decoder = SocketIOPacketDecoder()
            #expect(throws: SocketIOParseError.self, "\(text)") { _ = try decoder.receive(text: text) }
            #expect(!decoder.isWaitingForAttachments)
        }
        // As many as the placeholders (or fewer: a placeholder without its attachment fails when
        // the packet is completed) still wait for their attachments.
        var decoder = SocketIOPacketDecoder()
        #expect(try decoder.receive(text: "51-[\"e\",{\"_placeholder\":true,\"num\":0}]") == nil)
        let packet = try #require(try decoder.receive(binary: Data([7])))
        #expect(packet.data == ["e", .binary(Data([7]))])
    }

    @Test("an attachment nobody announced is a typed error")
    func unexpectedAttachment() {
        var decoder = SocketIOPacketDecoder()
        #expect(throws: SocketIOParseError.unexpectedAttachment("a binary message arrived with no binary packet pending")) {
            _ = try decoder.receive(binary: Data([1]))
        }
    }

    @Test("JSON strings round-trip: escapes, surrogate pairs, control characters")
    func jsonStrings() throws {
        var decoder = SocketIOPacketDecoder()
        let packet = try #require(try decoder.receive(text: #"2["e","\ud83d\ude00 \u00e9\/\t",1.5e3,-0.25,true,null]"#))
        #expect(packet.data == ["e", "😀 é/\t", 1500, -0.25, true, nil])
        #expect(SocketIOCodec.encode(packet).text == #"2["e","😀 é/\t",1500,-0.25,true,null]"#)
    }
}
