import RealtimeCore
/// Why an Engine.IO or Socket.IO packet could not be decoded. The messages follow the reference
/// parsers (engine.io-parser, socket.io-parser) so logs read the same as a Node server's.
///
/// The client never crashes or stalls on one of these: a malformed packet from the server ends the
/// session with a `RealtimeCore/RealtimeError` of code `protocolViolation` whose `underlying` is
/// this error, and the manager reconnects.
public enum SocketIOParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// An Engine.IO packet or payload that is not valid (engine.io-parser's "parser error").
    case engineIOParserError(String)
    /// A Socket.IO packet type outside 0...6.
    case unknownPacketType(String)
    /// A binary packet whose attachment count is missing or not a non-negative integer.
    case illegalAttachments(String)
    /// A payload that is not valid JSON or not valid for the packet type.
    case invalidPayload(String)
    /// A binary attachment arrived when none was expected, or a placeholder points past the attachments.
    case unexpectedAttachment(String)

    /// A readable summary, for logs and messages.
    public var description: String {
        switch self {
        case .engineIOParserError(let detail): "parser error: \(detail)"
        case .unknownPacketType(let detail): "unknown packet type \(detail)"
        case .illegalAttachments(let detail): "Illegal attachments: \(detail)"
        case .invalidPayload(let detail): "invalid payload: \(detail)"
        case .unexpectedAttachment(let detail): "unexpected attachment: \(detail)"
        }
    }
}

extension SocketIOParseError {
    /// A JSON syntax error in a packet's payload, worded as socket.io-parser words it.
    init(_ error: JSONParseError) {
        self = .invalidPayload(error.description)
    }
}

/// Runs `body` over the UTF-8 bytes of `text` (contiguous for native strings, copied otherwise).
func withUTF8Bytes<R>(
    _ text: String, _ body: (UnsafeRawBufferPointer) throws(SocketIOParseError) -> R
) throws(SocketIOParseError) -> R {
    var text = text
    let result: Result<R, SocketIOParseError> = text.withUTF8 { bytes in
        do throws(SocketIOParseError) { return .success(try body(UnsafeRawBufferPointer(bytes))) } catch { return .failure(error) }
    }
    return try result.get()
}
