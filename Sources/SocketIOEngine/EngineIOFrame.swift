import Foundation
import NIOCore
import NIOFoundationCompat
import OrderedCollections
@_spi(RealtimeEngine) import RealtimeCore

/// A group of Engine.IO packets that must go out together and in order (a Socket.IO packet and its
/// attachments, or a control packet), with where it came from so unsent frames can be given back.
struct EngineIOFrame: OutboxMessage {
    var packets: [EngineIOPacket]
    /// The namespace of the Socket.IO packet it carries; nil for Engine.IO control packets and
    /// CONNECT packets, which are not re-sent after a reconnect.
    var requeueNamespace: String?
    /// The ack id of an emit that waits for an ack.
    var ackID: Int? = nil

    /// The bytes the frame takes in a polling payload, with one record separator.
    var pollingSize: Int { packets.reduce(0) { $0 + $1.pollingSize + 1 } }

    var outboxSize: Int { pollingSize }
    var outboxParts: Int { packets.count }
    /// Socket.IO packets (emits, acks) are; Engine.IO control packets and CONNECT are not.
    var isApplicationData: Bool { requeueNamespace != nil }

    /// The bytes of its largest WebSocket message.
    var largestWebSocketMessage: Int {
        packets.reduce(0) { largest, packet in
            switch packet.payload {
            case .binary(let data): max(largest, data.count)
            default: max(largest, packet.pollingSize)
            }
        }
    }
}

extension EngineIOFrame {
    /// The emit this frame carries, as the `dropped` client event reports it:
    /// `{"event": name, "data": [arguments], "ackId": id}` (`ackId` only for an emit with an ack).
    var droppedEmitDescription: JSONValue {
        var members: OrderedDictionary<String, JSONValue> = [:]
        if case .text(let text)? = packets.first?.payload, let (packet, _) = try? SocketIOCodec.decode(text: text) {
            var attachments: [Data] = []
            for part in packets.dropFirst() { if case .binary(let data) = part.payload { attachments.append(data) } }
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
        for packet in packets {
            switch EngineIOCodec.encode(packet, supportsBinary: true) {
            case .text(let text): messages.append(.text(text))
            case .binary(let data): messages.append(.binary(ByteBuffer(data: data)))
            }
        }
    }
}
