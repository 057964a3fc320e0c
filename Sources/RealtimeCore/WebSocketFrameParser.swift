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
        /// For a text frame that is a whole message, when the parser checks text: whether it is
        /// valid UTF-8 (checked while the header is read, in the same access to the bytes). Nil
        /// when not checked here.
        var validText: Bool? = nil

        var fin: Bool { header & 0x80 != 0 }
        /// RSV1, RSV2 or RSV3 is set (no extension is negotiated on a connection this parser reads).
        var hasReservedBits: Bool { header & 0x70 != 0 }
        var opcode: WebSocketOpcode { WebSocketOpcode(encodedWebSocketOpcode: header & 0x0F)! }
    }

    let maxFrameSize: Int
    /// Whether a text frame that is a whole message (FIN set) has its UTF-8 checked here
    /// (``Frame/validText``).
    let checksText: Bool
    /// Bytes of a frame not yet whole, from earlier reads.
    private var pending: ByteBuffer?

    init(maxFrameSize: Int, checksText: Bool = false) {
        self.maxFrameSize = maxFrameSize
        self.checksText = checksText
    }

    /// The bytes of one read, after those kept from earlier reads: take the frames from them with
    /// ``nextFrame(_:)``, then give the rest back with ``keep(_:)``.
    mutating func take(_ bytes: ByteBuffer) -> ByteBuffer {
        guard var held = pending else {
            tookKept = false
            return bytes
        }
        pending = nil
        tookKept = true
        var bytes = bytes
        // The kept buffer is the parser's own (see `keep`): appended to in place.
        held.writeBuffer(&bytes)
        return held
    }

    /// The room of the buffer kept for a frame not yet whole (for tests).
    var keptCapacity: Int? { pending?.capacity }
    /// How many times a frame not yet whole was copied into a buffer of its own (for tests).
    private(set) var keptCopies = 0
    /// The bytes `take` returned were the kept buffer.
    private var tookKept = false

    /// Keeps what is left of the bytes (a frame not yet whole) for the next read, in a buffer of
    /// its own, as large as the whole frame when its header tells: the read it came in is let go
    /// (the messages cut from that read share its memory, and a consumer may hold them a while;
    /// appending to a shared buffer would copy all of it, the bytes already read included, read
    /// after read), and the reads that complete the frame are appended without growing it again.
    mutating func keep(_ rest: ByteBuffer) {
        guard rest.readableBytes > 0 else { return }
        // Still the kept buffer, no frame cut from it (its reader index is where the frame
        // starts): nothing shares it, so the next read is appended to it in place. A frame over
        // many reads is copied once, not once per read.
        if tookKept, rest.readerIndex == 0 {
            pending = rest
            return
        }
        keptCopies += 1
        var rest = rest
        var own = ByteBufferAllocator().buffer(capacity: max(rest.readableBytes, Self.frameLength(rest, limit: maxFrameSize) ?? 0))
        own.writeBuffer(&rest)
        pending = own
    }

    /// The length of the frame at the buffer's reader index, header included, once its header is
    /// there (at most `limit` plus the longest header).
    private static func frameLength(_ buffer: ByteBuffer, limit: Int) -> Int? {
        buffer.withUnsafeReadableBytes { bytes in
            declaredLength(bytes).map { Int(min($0.payload, UInt64(limit))) + $0.header }
        }
    }

    /// The header's length and the payload length it declares, once the length field is there.
    /// (Inlined: every frame's header is read through it.)
    @inline(__always)
    private static func declaredLength(_ bytes: UnsafeRawBufferPointer) -> (header: Int, payload: UInt64)? {
        guard bytes.count >= 2 else { return nil }
        switch bytes[1] & 0x7F {
        case 126:
            guard bytes.count >= 4 else { return nil }
            return (4, UInt64(bytes[2]) << 8 | UInt64(bytes[3]))
        case 127:
            guard bytes.count >= 10 else { return nil }
            var extended: UInt64 = 0
            for index in 2..<10 { extended = extended << 8 | UInt64(bytes[index]) }
            return (10, extended)
        case let short:
            return (2, UInt64(short))
        }
    }

    /// The next whole frame at the buffer's reader index (moved past it), or nil when the frame
    /// there is not whole yet (the index is left where the frame starts). Mutating, though it
    /// changes nothing: a non-mutating call on the reader's stored parser copies the parser, the
    /// kept bytes' reference count included, at every frame.
    mutating func nextFrame(_ buffer: inout ByteBuffer) throws(RealtimeError) -> Frame? {
        // The header read, and a whole text message's UTF-8 checked, in one access to the bytes
        // (each access to a buffer's bytes costs a runtime exclusivity check).
        let header = buffer.withUnsafeReadableBytes { [maxFrameSize, checksText] bytes in
            Self.header(bytes, maxFrameSize: maxFrameSize, checksText: checksText)
        }
        switch header {
        case .incomplete:
            return nil
        case .frame(let first, let headerLength, let length, let validText):
            buffer.moveReaderIndex(forwardBy: headerLength)
            return Frame(header: first, data: buffer.readSlice(length: length)!, validText: validText)
        case .masked:
            throw RealtimeError(.protocolViolation, "the server sent a masked WebSocket frame", closeCode: 1002, stage: .established)
        case .topBitSet:
            throw RealtimeError(.protocolViolation, "the server sent a WebSocket frame length with its top bit set", closeCode: 1002, stage: .established)
        case .tooLarge:
            throw tooLarge()
        case .longControl:
            throw RealtimeError(.protocolViolation, "the server sent a control frame of more than 125 bytes", closeCode: 1002, stage: .established)
        case .fragmentedControl:
            throw RealtimeError(.protocolViolation, "the server sent a fragmented control frame", closeCode: 1002, stage: .established)
        }
    }

    /// What the bytes at a frame's start tell.
    private enum Header {
        /// The header or the payload is not whole yet.
        case incomplete
        case frame(first: UInt8, headerLength: Int, length: Int, validText: Bool?)
        case masked, topBitSet, tooLarge, longControl, fragmentedControl
    }

    private static func header(_ bytes: UnsafeRawBufferPointer, maxFrameSize: Int, checksText: Bool) -> Header {
        guard bytes.count >= 2 else { return .incomplete }
        let first = bytes[0]
        let second = bytes[1]
        let opcodeBits = first & 0x0F
        let isControl = opcodeBits & 0x08 != 0
        let fin = first & 0x80 != 0
        guard second & 0x80 == 0 else { return .masked }
        guard let (headerLength, declared) = declaredLength(bytes) else { return .incomplete }
        if headerLength == 10 {
            guard declared & (1 << 63) == 0 else { return .topBitSet }
            guard declared <= UInt64(maxFrameSize) else { return .tooLarge }
        }
        let length = Int(declared)
        if isControl {
            guard length <= 125 else { return .longControl }
            guard fin else { return .fragmentedControl }
        }
        guard length <= maxFrameSize else { return .tooLarge }
        guard bytes.count >= headerLength + length else { return .incomplete }
        var validText: Bool?
        if checksText, fin, opcodeBits == 0x1 {
            validText = isValidUTF8(UnsafeRawBufferPointer(rebasing: bytes[headerLength..<(headerLength + length)]))
        }
        return .frame(first: first, headerLength: headerLength, length: length, validText: validText)
    }

    private func tooLarge() -> RealtimeError {
        RealtimeError(.messageTooLarge, "the server sent a frame larger than maxMessageSize", closeCode: 1009, stage: .established)
    }
}
