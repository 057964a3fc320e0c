import Foundation
import NIOCore
import NIOFoundationCompat
import OrderedCollections
@_spi(RealtimeEngine) import RealtimeCore

/// A group of Engine.IO packets that must go out together and in order (a Socket.IO packet and its
/// attachments, or a control packet), with where it came from so unsent frames can be given back.
///
/// The packets are kept as they travel, encoded once when the frame is made: a text packet as its
/// type digit followed by its text (`42["chat",1]`), a binary packet as its bytes. A WebSocket
/// sends each part as one message; a polling payload joins them (binary ones as `b` + base64).
struct EngineIOFrame: OutboxMessage {
    /// One packet, encoded.
    enum Part: Sendable {
        /// A text packet: its type digit, then its text.
        case text(String)
        /// A binary message (an attachment).
        case binary(Data)

        /// The bytes it takes in a polling payload.
        var pollingSize: Int {
            switch self {
            case .text(let text): text.utf8.count
            case .binary(let data): EngineIOPacket.message(data).pollingSize
            }
        }
    }

    /// The first packet; the ones after it (a Socket.IO packet's attachments) are in `rest`, so a
    /// frame of one packet holds no array.
    var first: Part
    var rest: [Part]
    /// The namespace of the Socket.IO packet it carries; nil for Engine.IO control packets and
    /// CONNECT packets, which are not re-sent after a reconnect.
    var requeueNamespace: String?
    /// The ack id of an emit that waits for an ack.
    var ackID: Int? = nil
    /// A volatile emit: never taken back for the next connection.
    var isVolatile = false
    /// Written to a connection that then broke before the server confirmed it: the server may have
    /// it. Sending it again is a re-send; dropping it drops an emit that was possibly delivered.
    var wasWritten = false
    /// How many times a server refused a send that carried it (a polling POST answered with a
    /// status that is not 2xx, or reset under it). A refused frame is next sent in a batch of its
    /// own, so a refused batch is never sent again unchanged (see `EngineIOSession.PollingRefusal`).
    var refusals: UInt8 = 0

    /// A frame of `packets` (at least one), each encoded here.
    init(packets: [EngineIOPacket], requeueNamespace: String?, ackID: Int? = nil) {
        let parts = packets.map(Self.part)
        self.init(first: parts.first ?? .text(""), rest: Array(parts.dropFirst()), requeueNamespace: requeueNamespace, ackID: ackID)
    }

    init(first: Part, rest: [Part] = [], requeueNamespace: String?, ackID: Int? = nil) {
        self.first = first
        self.rest = rest
        self.requeueNamespace = requeueNamespace
        self.ackID = ackID
    }

    private static func part(_ packet: EngineIOPacket) -> Part {
        if case .binary(let data) = packet.payload { return .binary(data) }
        guard case .text(let text) = EngineIOCodec.encode(packet, supportsBinary: false) else { return .text("") }
        return .text(text)
    }

    /// Its parts, in order.
    var parts: [Part] { [first] + rest }

    /// Whether it carries the Engine.IO close packet.
    var isClose: Bool {
        guard case .text(let text) = first else { return false }
        return text.utf8.first == EngineIOPacketType.close.character
    }

    /// What an Engine.IO 3 payload adds to each part beyond its text and one separator: the
    /// length's digits in place of the separator, `b4` for `b`, and the surrogate escapes of
    /// ``EngineIO3Codec/pollingText(_:)``. Zero for revision 4; set by ``forRevision3()``.
    var revision3Extra = 0

    /// The bytes the frame takes in a polling payload, with one record separator.
    var pollingSize: Int { rest.reduce(first.pollingSize + 1 + revision3Extra) { $0 + $1.pollingSize + 1 } }

    /// The bytes of a polling payload that carries only this frame (no separator after its last
    /// part; an Engine.IO 3 record's colon is part of its size).
    var soloPollingSize: Int { revision3Extra > 0 ? pollingSize : pollingSize - 1 }

    /// The frame, sized for an Engine.IO 3 polling payload (`<length>:<packet>` records), so that
    /// batches and the `maxPayload` check count the bytes that are sent.
    func forRevision3() -> EngineIOFrame {
        var frame = self
        frame.revision3Extra = parts.reduce(0) { sum, part in
            switch part {
            case .text(let text):
                let growth = EngineIO3Codec.pollingTextGrowth(text)
                // Escapes are ASCII: a UTF-16 unit each, as the 2 units of the character they replace
                // grow to 12.
                let units = text.utf16.count + growth / 8 * 10
                return sum + growth + String(units).utf8.count
            case .binary(let data):
                let units = 2 + (data.count + 2) / 3 * 4
                return sum + 1 + String(units).utf8.count
            }
        }
        return frame
    }

    var outboxSize: Int { pollingSize }
    var outboxParts: Int { 1 + rest.count }
    /// Socket.IO packets (emits, acks) are; Engine.IO control packets and CONNECT are not.
    var isApplicationData: Bool { requeueNamespace != nil }
    /// What would be sent again after a drop (see `SocketIOClient.sessionEnded`) is counted by
    /// namespace when it leaves the resend window unconfirmed; an emit with an ack is reported
    /// through its ack instead.
    var evictionKey: String? { ackID == nil && !isVolatile ? requeueNamespace : nil }

    /// The bytes of its largest WebSocket message.
    var largestWebSocketMessage: Int {
        rest.reduce(Self.webSocketSize(first)) { max($0, Self.webSocketSize($1)) }
    }

    private static func webSocketSize(_ part: Part) -> Int {
        switch part {
        case .text(let text): text.utf8.count
        case .binary(let data): data.count
        }
    }

    /// The polling payload (engine.io-parser 5) carrying `frames`' packets in order: records joined
    /// by the record separator, binary ones as `b` + base64.
    static func pollingPayload(_ frames: some Sequence<EngineIOFrame>) -> String {
        var out = ""
        var separate = false
        for frame in frames {
            for part in frame.parts {
                if separate { out.unicodeScalars.append(UnicodeScalar(EngineIOCodec.recordSeparator)) }
                separate = true
                switch part {
                case .text(let text):
                    out += text
                case .binary(let data):
                    // Engine.IO's rule for binary where only text travels (`b` + base64).
                    if case .text(let text) = EngineIOCodec.encode(.message(data), supportsBinary: false) { out += text }
                }
            }
        }
        return out
    }

    /// The Engine.IO 3 polling payload carrying `frames`' packets in order: `<length>:<packet>`
    /// each, text as ``EngineIO3Codec/pollingText(_:)`` writes it, binary ones as `b4` + base64.
    static func pollingPayloadRevision3(_ frames: some Sequence<EngineIOFrame>) -> String {
        var out = ""
        for frame in frames {
            for part in frame.parts {
                switch part {
                case .text(let text):
                    EngineIO3Codec.appendRecord(EngineIO3Codec.pollingText(text), to: &out)
                case .binary(let data):
                    if case .text(let text) = EngineIO3Codec.encode(.message(data), supportsBinary: false) {
                        EngineIO3Codec.appendRecord(text, to: &out)
                    }
                }
            }
        }
        return out
    }
}

extension EngineIOFrame {
    /// The emit this frame carries, as the `dropped` client event reports it:
    /// `{"event": name, "data": [arguments], "ackId": id, "delivery": "notSent" | "possiblySent"}`
    /// (`ackId` only for an emit with an ack).
    var droppedEmitDescription: JSONValue {
        guard case .object(var members) = emitDescription else { return emitDescription }
        members["delivery"] = .string(wasWritten ? SocketIODelivery.possiblySent.rawValue : SocketIODelivery.notSent.rawValue)
        return .object(members)
    }

    /// The emit this frame carries: `{"event": name, "data": [arguments], "ackId": id}` (`ackId`
    /// only for an emit with an ack).
    var emitDescription: JSONValue {
        var members: OrderedDictionary<String, JSONValue> = [:]
        if case .text(let encoded) = first, encoded.utf8.first == EngineIOPacketType.message.character,
           let (packet, _) = try? SocketIOCodec.decode(text: String(encoded.dropFirst())) {
            var attachments: [Data] = []
            for part in rest { if case .binary(let data) = part { attachments.append(data) } }
            let data = (packet.data.flatMap { try? SocketIOCodec.reconstruct($0, attachments: attachments) } ?? packet.data)?.arrayValue ?? []
            if case .string(let name)? = data.first { members["event"] = .string(name) }
            members["data"] = .array(Array(data.dropFirst()))
        }
        if let ackID { members["ackId"] = .number(Double(ackID)) }
        return .object(members)
    }
}

extension EngineIOFrame {
    /// The frame's packets as WebSocket messages, one each (binary attachments as binary messages).
    var webSocketMessages: [RealtimeMessage] {
        var messages: [RealtimeMessage] = []
        appendWebSocketMessages(to: &messages)
        return messages
    }

    /// Appends ``webSocketMessages`` to `messages` (a writer's batch: no array per frame).
    func appendWebSocketMessages(to messages: inout [RealtimeMessage]) {
        Self.append(first, to: &messages)
        for part in rest { Self.append(part, to: &messages) }
    }

    /// ``appendWebSocketMessages(to:)`` for Engine.IO 3: a binary message's frame starts with its
    /// packet type (4).
    func appendRevision3WebSocketMessages(to messages: inout [RealtimeMessage]) {
        for part in parts {
            switch part {
            case .text(let text): messages.append(.text(text))
            case .binary(let data):
                var buffer = ByteBuffer()
                buffer.reserveCapacity(data.count + 1)
                buffer.writeInteger(EngineIOPacketType.message.rawValue)
                buffer.writeBytes(data)
                messages.append(.binary(buffer))
            }
        }
    }

    private static func append(_ part: Part, to messages: inout [RealtimeMessage]) {
        switch part {
        case .text(let text): messages.append(.text(text))
        case .binary(let data): messages.append(.binary(ByteBuffer(data: data)))
        }
    }
}
