import Foundation
@testable import SocketIOEngine
import Testing

/// The wire reference for socket.io 2.x servers (Engine.IO protocol 3, Socket.IO protocol 4): every
/// case of `socketio2-vectors.json`, made by the pinned reference peer (python-engineio 3.14.2,
/// python-socketio 4.6.1; `Scripts/make-socketio2-vectors.py`), is decoded by our codec and must give
/// the packet back, and our encoding must match the reference's byte for byte.
@Suite("socket.io 2.x conformance vectors")
struct SocketIO2ConformanceTests {
    typealias Vectors = SocketIOConformanceTests

    static let vectors: JSONValue = {
        let url = Bundle.module.url(forResource: "socketio2-vectors", withExtension: "json")!
        return try! JSONDecoder().decode(JSONValue.self, from: Data(contentsOf: url))
    }()

    struct PacketCase: CustomTestStringConvertible, Sendable {
        let packet: EngineIOPacket
        let text: String
        let websocket: EngineIOCodec.Encoded
        var testDescription: String { text.count > 40 ? String(text.prefix(40)) + "…" : text }
    }

    struct PayloadCase: CustomTestStringConvertible, Sendable {
        let packets: [EngineIOPacket]
        let text: String
        let binary: Data
        var testDescription: String { text.count > 40 ? String(text.prefix(40)) + "…" : text }
    }

    struct SocketIOCase: CustomTestStringConvertible, Sendable {
        let packet: SocketIOPacket
        let text: String
        let attachments: [Data]
        var testDescription: String { text }
    }

    /// A vector's packet: an open packet's data is the JSON text the reference wrote.
    static func engineIOPacket(_ object: JSONValue, text: String? = nil) -> EngineIOPacket {
        // An open packet's data is the JSON text the reference wrote (the vector lists it as an
        // object); in a payload it is filled in from the payload's text.
        if object["type"] == "open" { return EngineIOPacket(.open, .text(text.map { String($0.dropFirst()) } ?? "")) }
        var plain = object
        if object["data"] == .null { plain = ["type": object["type"]!] }
        return Vectors.engineIOPacket(plain)
    }

    static let packetCases: [PacketCase] = vectors["engineio3Packets"]!.arrayValue!.map { entry in
        let text = entry["text"]!.stringValue!
        let websocket: EngineIOCodec.Encoded = entry["websocket"]!["text"]?.stringValue.map { .text($0) }
            ?? .binary(Vectors.hex(entry["websocket"]!["binary"]!.stringValue!))
        return PacketCase(packet: engineIOPacket(entry, text: text), text: text, websocket: websocket)
    }

    static let payloadCases: [PayloadCase] = vectors["engineio3Payloads"]!.arrayValue!.map { entry in
        let text = entry["text"]!.stringValue!
        var packets = entry["packets"]!.arrayValue!.map { engineIOPacket($0) }
        // The open packet's JSON as the reference wrote it (the vector lists it as an object).
        if let index = packets.firstIndex(where: { $0.type == .open }), let range = text.range(of: "0{") {
            let json = text[range.lowerBound...].dropFirst().prefix { $0 != "}" } + "}"
            packets[index] = EngineIOPacket(.open, .text(String(json)))
        }
        return PayloadCase(packets: packets, text: text, binary: Vectors.hex(entry["binary"]!.stringValue!))
    }

    static let socketIOCases: [SocketIOCase] = vectors["socketio4Packets"]!.arrayValue!.map { entry in
        SocketIOCase(
            packet: SocketIOPacket(
                type: SocketIOPacketType(rawValue: UInt8(entry["type"]!.intValue!))!,
                namespace: entry["namespace"]!.stringValue!,
                id: entry["id"]?.intValue,
                data: entry["data"].flatMap { value -> JSONValue? in value == .null ? Optional.none : Vectors.value(value) }),
            text: entry["text"]!.stringValue!,
            attachments: entry["attachments"]!.arrayValue!.map { Vectors.hex($0.stringValue!) })
    }

    @Test("the vector file holds every case")
    func counts() {
        #expect(Self.packetCases.count == 11)
        #expect(Self.payloadCases.count == 4)
        #expect(Self.socketIOCases.count == 18)
    }

    @Test("Engine.IO 3 packets: text (polling) and WebSocket encodings match python-engineio 3", arguments: packetCases)
    func packet(_ vector: PacketCase) throws {
        #expect(EngineIO3Codec.encode(vector.packet, supportsBinary: false) == .text(vector.text))
        #expect(EngineIO3Codec.encode(vector.packet, supportsBinary: true) == vector.websocket)
        #expect(try EngineIO3Codec.decode(text: vector.text) == vector.packet)
        switch vector.websocket {
        case .text(let text): #expect(try EngineIO3Codec.decode(text: text) == vector.packet)
        case .binary(let data): #expect(try EngineIO3Codec.decode(binary: data) == vector.packet)
        }
    }

    @Test("Engine.IO 3 payloads: the text framing and the XHR2 binary framing decode; ours encodes the same", arguments: payloadCases)
    func payload(_ vector: PayloadCase) throws {
        #expect(EngineIO3Codec.encodePayload(vector.packets) == vector.text)
        #expect(try EngineIO3Codec.decodePayload(vector.text) == vector.packets)
        #expect(try vector.binary.withUnsafeBytes { try EngineIO3Codec.decodePayload($0) } == vector.packets)
    }

    @Test("Socket.IO protocol 4 packets decode to the reference's packet; ours encode to its text (non-ASCII escaped, as in a polling payload)", arguments: socketIOCases)
    func socketIO(_ vector: SocketIOCase) throws {
        var decoder = SocketIOPacketDecoder(version: .v2)
        var decoded = try decoder.receive(text: vector.text)
        for attachment in vector.attachments {
            #expect(decoded == nil)
            decoded = try decoder.receive(binary: attachment)
        }
        let packet = try #require(decoded)
        #expect(packet.namespace == vector.packet.namespace)
        #expect(packet.id == vector.packet.id)
        #expect(packet.data == vector.packet.data)

        let encoded = SocketIOCodec.encode(vector.packet)
        let ours = EngineIO3Codec.asciiOnly(encoded.text)
        if vector.packet.namespace != "/", vector.packet.id == nil, vector.packet.data == nil {
            // A namespace with nothing after it: socket.io-parser 3 (the JavaScript socket.io 2.x)
            // writes the comma, python-socketio 4 leaves it out; both read either.
            #expect(ours == vector.text + ",")
        } else {
            #expect(ours == vector.text)
        }
        #expect(encoded.attachments == vector.attachments)
    }

    /// Lengths in a text payload: engine.io counts UTF-16 code units, python-engineio's writer
    /// bytes and its reader characters. A payload is read with the first count under which all of
    /// it parses (a server counts one way throughout).
    @Test("a text payload's lengths in UTF-16 units, bytes or characters are all read")
    func lengthCounts() throws {
        let text = "4é😀"  // 4 UTF-16 units, 7 bytes, 3 characters
        let expected = [EngineIOPacket.message("é😀"), EngineIOPacket.message("0")]
        for length in [4, 7, 3] {
            #expect(try EngineIO3Codec.decodePayload("\(length):\(text)2:40") == expected, "length \(length)")
        }
        // What the client writes is UTF-8, as the JavaScript client writes it, its length in UTF-16
        // units; a character beyond the Basic Multilingual Plane (two units, one character) is
        // escaped, so UTF-16 units and characters agree: 19 for engine.io and python-engineio alike.
        let written = EngineIO3Codec.encodePayload([.message("2[\"é😀\"]")])
        #expect(written == "19:42[\"é\\ud83d\\ude00\"]")
        #expect(written.dropFirst(3).utf16.count == 19 && written.dropFirst(3).unicodeScalars.count == 19)
        #expect(try EngineIO3Codec.decodePayload(written) == [.message("2[\"é\\ud83d\\ude00\"]")])
        // The sizes a batch and the maxPayload check count are the bytes sent (the record's colon
        // stands where revision 4 has its separator).
        let frame = EngineIOFrame(packets: [.message("2[\"é😀\"]")], requeueNamespace: "/").forRevision3()
        #expect(frame.pollingSize == EngineIOFrame.pollingPayloadRevision3([frame]).utf8.count)
        #expect(frame.soloPollingSize == EngineIOFrame.pollingPayloadRevision3([frame]).utf8.count)
        let plain = EngineIOFrame(packets: [.message("2[\"é😀\"]")], requeueNamespace: "/")
        #expect(plain.soloPollingSize == EngineIOFrame.pollingPayload([plain]).utf8.count)
    }

    @Test("malformed Engine.IO 3 payloads fail with a typed error")
    func malformedPayloads() {
        for input in ["5:4hi", "x:4hi", "4hello", "2:4", "3:4hi:", "1:"] {
            #expect(throws: SocketIOParseError.self, "\(input)") { try EngineIO3Codec.decodePayload(input) }
        }
        for bytes: [UInt8] in [[0, 5, 0xFF, 0x34], [0, 0xFF], [2, 1, 0xFF, 0x34], [1, 1, 0xFF, 9], [0, 1]] {
            #expect(throws: SocketIOParseError.self, "\(bytes)") { try bytes.withUnsafeBytes { try EngineIO3Codec.decodePayload($0) } }
        }
        #expect(throws: SocketIOParseError.self) { try EngineIO3Codec.decode(binary: Data()) }
        #expect(throws: SocketIOParseError.self) { try EngineIO3Codec.decode(text: "b9AAAA") }
    }
}
