import NIOCore
import NIOWebSocket

/// Cuts a server's bytes into WebSocket frames (RFC 6455 section 5.2), for ``WebSocketReadHandler``,
/// which reads the bytes of an uncompressed connection itself: one handler from the socket's bytes
/// to the consumer's messages, so a message passes no other handler and is never boxed on its way.
///
/// A frame's payload is a slice of the bytes read (no copy) when the read holds it whole; a frame
/// cut across reads is collected first. The rules held here, each a typed error with the close
/// code the connection fails with: a frame longer than `maxFrameSize` (1009, `messageTooLarge`);
/// a masked frame (a server must not mask, section 5.1), a control frame longer than 125 bytes
/// or fragmented (section 5.5), a 64-bit length with its top bit set (1002, `protocolViolation`).
struct WebSocketFrameParser {
    /// A frame as read: its first header byte and its payload. (swift-nio's `WebSocketFrame` keeps
    /// its payload in storage allocated per frame.)
    struct Frame {
        let header: UInt8
        let data: ByteBuffer

        var fin: Bool { header & 0x80 != 0 }
        /// RSV1, RSV2 or RSV3 is set (no extension is negotiated on a connection this parser reads).
        var hasReservedBits: Bool { header & 0x70 != 0 }
        var opcode: WebSocketOpcode { WebSocketOpcode(encodedWebSocketOpcode: header & 0x0F)! }
    }

    let maxFrameSize: Int
    /// Bytes of a frame not yet whole, from earlier reads.
    private var pending: ByteBuffer?

    init(maxFrameSize: Int) {
        self.maxFrameSize = maxFrameSize
    }

    /// The bytes of one read, after those kept from earlier reads: take the frames from them with
    /// ``nextFrame(_:)``, then give the rest back with ``keep(_:)``.
    mutating func take(_ bytes: ByteBuffer) -> ByteBuffer {
        guard var held = pending else { return bytes }
        pending = nil
        var bytes = bytes
        held.writeBuffer(&bytes)
        return held
    }

    /// Keeps what is left of the bytes (a frame not yet whole) for the next read.
    mutating func keep(_ rest: ByteBuffer) {
        if rest.readableBytes > 0 { pending = rest }
    }

    /// The next whole frame at the buffer's reader index (moved past it), or nil when the frame
    /// there is not whole yet (the index is left where the frame starts).
    func nextFrame(_ buffer: inout ByteBuffer) throws(RealtimeError) -> Frame? {
        let start = buffer.readerIndex
        guard let first = buffer.getInteger(at: start, as: UInt8.self), let second = buffer.getInteger(at: start + 1, as: UInt8.self)
        else { return nil }
        let opcodeBits = first & 0x0F
        let isControl = opcodeBits & 0x08 != 0
        let fin = first & 0x80 != 0
        guard second & 0x80 == 0 else {
            throw RealtimeError(.protocolViolation, "the server sent a masked WebSocket frame", closeCode: 1002, stage: .established)
        }
        var headerLength = 2
        var length = Int(second & 0x7F)
        switch length {
        case 126:
            guard let extended = buffer.getInteger(at: start + 2, as: UInt16.self) else { return nil }
            length = Int(extended)
            headerLength = 4
        case 127:
            guard let extended = buffer.getInteger(at: start + 2, as: UInt64.self) else { return nil }
            guard extended & (1 << 63) == 0 else {
                throw RealtimeError(.protocolViolation, "the server sent a WebSocket frame length with its top bit set", closeCode: 1002, stage: .established)
            }
            guard extended <= UInt64(maxFrameSize) else { throw tooLarge() }
            length = Int(extended)
            headerLength = 10
        default:
            break
        }
        if isControl {
            guard length <= 125 else {
                throw RealtimeError(.protocolViolation, "the server sent a control frame of more than 125 bytes", closeCode: 1002, stage: .established)
            }
            guard fin else {
                throw RealtimeError(.protocolViolation, "the server sent a fragmented control frame", closeCode: 1002, stage: .established)
            }
        }
        guard length <= maxFrameSize else { throw tooLarge() }
        guard buffer.readableBytes >= headerLength + length else { return nil }
        buffer.moveReaderIndex(forwardBy: headerLength)
        return Frame(header: first, data: buffer.readSlice(length: length)!)
    }

    private func tooLarge() -> RealtimeError {
        RealtimeError(.messageTooLarge, "the server sent a frame larger than maxMessageSize", closeCode: 1009, stage: .established)
    }
}
