public import NIOCore

/// One message on a duplex transport: text or binary.
public enum RealtimeMessage: Sendable, Equatable, CustomStringConvertible {
    /// A text message.
    case text(String)
    /// A binary message.
    case binary(ByteBuffer)

    /// A readable summary, for logs and messages.
    public var description: String {
        switch self {
        case .text(let text): "text(\(text.utf8.count) bytes)"
        case .binary(let buffer): "binary(\(buffer.readableBytes) bytes)"
        }
    }
}
