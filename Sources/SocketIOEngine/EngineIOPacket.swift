public import Foundation
import RealtimeCore

/// Engine.IO v4 packet types.
public enum EngineIOPacketType: UInt8, Sendable, CaseIterable {
    /// The Engine.IO v4 packet types, by their number on the wire.
    case open = 0, close, ping, pong, message, upgrade, noop

    var character: UInt8 { UInt8(ascii: "0") + rawValue }
}

/// One Engine.IO v4 packet: a type and an optional text or binary payload.
public struct EngineIOPacket: Sendable, Hashable {
    /// A packet's data: none, text or binary.
    public enum Payload: Sendable, Hashable {
        /// No data.
        case none
        /// Text data.
        case text(String)
        /// Binary data.
        case binary(Data)
    }

    /// The packet type.
    public var type: EngineIOPacketType
    /// The packet's data.
    public var payload: Payload

    /// Makes a packet of `type` carrying `payload`.
    public init(_ type: EngineIOPacketType, _ payload: Payload = .none) {
        self.type = type
        self.payload = payload
    }

    /// A message packet carrying text.
    public static func message(_ text: String) -> EngineIOPacket { EngineIOPacket(.message, .text(text)) }
    /// A message packet carrying binary data.
    public static func message(_ data: Data) -> EngineIOPacket { EngineIOPacket(.message, .binary(data)) }

    /// The bytes this packet takes in a polling payload (binary as base64), which is what counts
    /// against the server's `maxPayload`.
    public var pollingSize: Int {
        switch payload {
        case .none: 1
        case .text(let text): 1 + text.utf8.count
        case .binary(let data): 1 + (data.count + 2) / 3 * 4
        }
    }
}

/// Engine.IO v4 encoding rules (engine.io-parser 5): the packet type as one ASCII digit followed by the
/// text; binary messages as raw WebSocket frames, or `b` + base64 where only text can travel (polling);
/// polling payloads joined with the record separator 0x1E.
public enum EngineIOCodec {
    /// The separator of packets in a polling payload (0x1E).
    public static let recordSeparator: UInt8 = 0x1E

    /// How one packet travels.
    public enum Encoded: Sendable, Hashable {
        /// A text frame (or a polling payload's text).
        case text(String)
        /// A binary frame.
        case binary(Data)
    }

    /// Encodes one packet. With `supportsBinary` (WebSocket), a binary message becomes a raw binary
    /// frame; without it (polling), `b` + base64.
    public static func encode(_ packet: EngineIOPacket, supportsBinary: Bool) -> Encoded {
        switch packet.payload {
        case .binary(let data):
            return supportsBinary ? .binary(data) : .text("b" + data.base64EncodedString())
        case .text(let text):
            return .text(String(UnicodeScalar(packet.type.character)) + text)
        case .none:
            return .text(String(UnicodeScalar(packet.type.character)))
        }
    }

    /// Decodes one text packet (a WebSocket text frame, or one record of a polling payload).
    public static func decode(text: String) throws(SocketIOParseError) -> EngineIOPacket {
        return try withUTF8Bytes(text) { bytes throws(SocketIOParseError) in try decode(bytes: bytes) }
    }

    /// Decodes one binary WebSocket frame: always a binary message.
    public static func decode(binary data: Data) -> EngineIOPacket {
        EngineIOPacket(.message, .binary(data))
    }

    static func decode(bytes: UnsafeRawBufferPointer) throws(SocketIOParseError) -> EngineIOPacket {
        guard let first = bytes.first else { throw .engineIOParserError("empty packet") }
        if first == UInt8(ascii: "b") {
            guard let data = Data(base64Encoded: Data(UnsafeRawBufferPointer(rebasing: bytes[1...]))) else {
                throw .engineIOParserError("invalid base64 in a binary packet")
            }
            return EngineIOPacket(.message, .binary(data))
        }
        guard first >= UInt8(ascii: "0"), let type = EngineIOPacketType(rawValue: first - UInt8(ascii: "0")) else {
            throw .engineIOParserError("unknown packet type \(String(decoding: [first], as: UTF8.self).debugDescription)")
        }
        if bytes.count == 1 { return EngineIOPacket(type) }
        return EngineIOPacket(type, .text(String(decoding: UnsafeRawBufferPointer(rebasing: bytes[1...]), as: UTF8.self)))
    }

    /// Joins packets into one polling payload.
    public static func encodePayload(_ packets: [EngineIOPacket]) -> String {
        var out = ""
        for (index, packet) in packets.enumerated() {
            if index > 0 { out.unicodeScalars.append(UnicodeScalar(recordSeparator)) }
            guard case .text(let text) = encode(packet, supportsBinary: false) else { continue }
            out += text
        }
        return out
    }

    /// Splits a polling payload into packets. Any bad record fails the whole payload, as in
    /// engine.io-parser. The bytes must be valid UTF-8.
    public static func decodePayload(_ bytes: UnsafeRawBufferPointer) throws(SocketIOParseError) -> [EngineIOPacket] {
        guard RealtimeCore.isValidUTF8(bytes) else { throw .engineIOParserError("the payload is not valid UTF-8") }
        var packets: [EngineIOPacket] = []
        var start = 0
        for index in 0...bytes.count where index == bytes.count || bytes[index] == recordSeparator {
            packets.append(try decode(bytes: UnsafeRawBufferPointer(rebasing: bytes[start..<index])))
            start = index + 1
        }
        return packets
    }

    /// Splits a polling payload into its packets.
    public static func decodePayload(_ text: String) throws(SocketIOParseError) -> [EngineIOPacket] {
        return try withUTF8Bytes(text) { bytes throws(SocketIOParseError) in try decodePayload(bytes) }
    }
}
