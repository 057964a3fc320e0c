import RealtimeCore

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
