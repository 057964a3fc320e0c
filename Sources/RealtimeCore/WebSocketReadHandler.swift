import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// The frame protocol of an uncompressed WebSocket client connection, run on its event loop (RFC
/// 6455 sections 5.2-5.6 and 7): the socket's bytes are cut into frames (``WebSocketFrameParser``),
/// fragments reassembled into messages, pings answered, the closing handshake answered, a
/// protocol's own keep-alive message handed to ``ProtocolPingHandler``, and what one read produced
/// goes to the connection's consumer in one batch (``InboundBuffer``). No task waits per connection
/// for frames: a connection's only waiting is its consumer's, in ``WebSocketMessages``. The
/// handlers between this one and the socket see the bytes of each read, not its frames.
///
/// The rules a server's frames are held to, each failing the connection with a close frame of the
/// given code and a typed error: a data frame with a reserved bit set (no extension is negotiated),
/// or with a reserved opcode, or a continuation without a message under way, or a new message
/// before the last one ended (1002, `protocolViolation`); a message growing past `maxMessageSize`
/// (1009, `messageTooLarge`); a text message that is not UTF-8 when `validateUTF8` is on (1007,
/// `invalidUTF8`). A close frame is answered with 1000, or with 1002 when its code may not be sent
/// (RFC 6455 section 7.4) or its length is 1, and 1007 when its reason is not UTF-8. Frame-level
/// errors (an oversized frame, a masked one, a fragmented or long control frame) fail it the same
/// way, with 1009 or 1002 (``WebSocketFrameParser``).
///
/// Backpressure: when the consumer's buffer is full, reads stop (this handler holds the channel's
/// `read()`) until the consumer took what waited.
///
/// Connections with permessage-deflate keep swift-websocket's handler, whose extension API is
/// asynchronous.
final class WebSocketReadHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    /// How many messages wait for the consumer before reading stops.
    static let bufferLimit = 16

    let messages: InboundBuffer<WebSocketInbound>
    // The state every frame touches is marked `@exclusivity(unchecked)`: the handler runs on its
    // event loop only, and the runtime's access checks cost more than a small frame's handling.
    @exclusivity(unchecked) private var parser: WebSocketFrameParser
    /// The server broke a rule and the connection is failing: nothing more is parsed.
    @exclusivity(unchecked) private var unparsable = false
    @exclusivity(unchecked) private var assembler: MessageAssembler
    /// The protocol's keep-alive handler, on the same event loop: a frame that is the peer's ping
    /// is offered to it before it is assembled.
    @exclusivity(unchecked) var protocolPing: ProtocolPingHandler?
    /// The keep-alive's counts: pongs are counted here (they answer its pings).
    var keepAliveCounts: NIOLockedValueBox<WebSocketKeepAliveCounts>?
    private var context: ChannelHandlerContext?
    @exclusivity(unchecked) private var batch: [WebSocketInbound] = []
    /// The consumer's buffer is full: `read()` is held until it asks for more.
    private var paused = false
    private var readHeld = false
    private(set) var closeSent = false
    /// The server closed its side of the TCP connection.
    private var inputClosed = false
    /// The server's close frame, once it came (code 1005 when it carried none).
    @exclusivity(unchecked) private(set) var closeReceived: WebSocketCloseInfo?
    private var keys = MaskingKeySource()
    /// Closes the channel when the closing handshake takes longer than the close timeout.
    private var closeTimer: TimerQueue.Timer?
    private let timers: TimerQueue

    init(maxMessageSize: Int, validateUTF8: Bool, timers: TimerQueue) {
        self.messages = InboundBuffer(limit: Self.bufferLimit)
        self.parser = WebSocketFrameParser(maxFrameSize: max(maxMessageSize, 125), checksText: validateUTF8)
        self.assembler = MessageAssembler(maxMessageSize: maxMessageSize, validateUTF8: validateUTF8)
        self.timers = timers
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let eventLoop = context.eventLoop
        messages.setOnDemand {
            eventLoop.execute { loopBound.value.resumeReading() }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        messages.setOnDemand(nil)
        messages.finish()
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        // After the server's close frame nothing more is read (RFC 6455 section 5.5.1).
        guard closeReceived == nil, !unparsable else { return }
        var bytes = parser.take(unwrapInboundIn(data))
        // Nobody reads any more (the consumer is done, or the connection failed): only the
        // closing handshake matters now. Asked once per read, as it takes the buffer's lock.
        let delivering = !messages.isFinished
        do throws(RealtimeError) {
            while let frame = try parser.nextFrame(&bytes) {
                received(frame, delivering: delivering, context)
                guard closeReceived == nil, !unparsable else { return }
            }
        } catch {
            fail(error.closeCode ?? 1002, error, context)
            return
        }
        parser.keep(bytes)
    }

    private func received(_ frame: WebSocketFrameParser.Frame, delivering: Bool, _ context: ChannelHandlerContext) {
        switch frame.opcode {
        case .ping:
            if !closeSent { write(WebSocketFrame(fin: true, opcode: .pong, data: frame.data), context) }
        case .pong:
            keepAliveCounts?.withLockedValue { $0.pongs += 1 }
        case .connectionClose:
            receivedClose(frame, context)
        case .text, .binary, .continuation:
            if delivering { receivedData(frame, context) }
        default:
            fail(1002, RealtimeError(.protocolViolation, "the server sent a frame with the reserved opcode \(frame.opcode)", closeCode: 1002), context)
        }
    }

    private func receivedData(_ frame: WebSocketFrameParser.Frame, _ context: ChannelHandlerContext) {
        guard !frame.hasReservedBits else {
            fail(1002, RealtimeError(.protocolViolation, "the server set a reserved bit of a WebSocket frame", closeCode: 1002), context)
            return
        }
        if let protocolPing, !assembler.isUnderWay, frame.fin,
            protocolPing.consumedPeerPing(opcode: frame.opcode, compressed: false, data: frame.data)
        {
            return
        }
        switch assembler.add(opcode: frame.opcode, fin: frame.fin, data: frame.data, validText: frame.validText) {
        case .partial: break
        case .message(let message): batch.append(message)
        case .failure(let error): fail(error.closeCode ?? 1002, error, context)
        }
    }

    private func receivedClose(_ frame: WebSocketFrameParser.Frame, _ context: ChannelHandlerContext) {
        var data = frame.data
        var reply: UInt16 = 1000
        let info: WebSocketCloseInfo
        switch data.readableBytes {
        case 0:
            info = WebSocketCloseInfo(code: 1005, reason: nil)
        case 1:
            info = WebSocketCloseInfo(code: 1002, reason: nil)
            reply = 1002
        default:
            let code = data.readInteger(as: UInt16.self) ?? 1005
            if !Self.maySend(code) { reply = 1002 }
            var reason: String?
            if data.readableBytes > 0 {
                reason = data.withUnsafeReadableBytes { isValidUTF8($0) ? String(decoding: $0, as: UTF8.self) : nil }
                if reason == nil { reply = 1007 }
            }
            info = WebSocketCloseInfo(code: code, reason: reason)
        }
        closeReceived = info
        if !closeSent { sendClose(code: reply, reason: nil, context) }
        deliverBatch()
        messages.finish()
        // The server closes the TCP connection now (RFC 6455 section 7.1.1); the transport waits for
        // that, within the close timeout.
    }

    /// Whether a close frame may carry `code` (RFC 6455 section 7.4): the defined codes that are
    /// not reserved for reporting, and the ranges for libraries and applications.
    static func maySend(_ code: UInt16) -> Bool {
        switch code {
        case 1000...1003, 1007...1011, 3000...4999: true
        default: false
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        deliverBatch()
        context.fireChannelReadComplete()
    }

    private func deliverBatch() {
        guard !batch.isEmpty else { return }
        let delivered = batch
        batch = []
        if !messages.yield(batch: delivered) { paused = true }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .some(.inputClosed) = event as? ChannelEvent {
            // The server half-closed (connections allow it, for the upgrade's sake): nothing more will
            // come. After our close frame that ends the handshake; before it, the consumer sees the
            // end of the messages and ``finish(code:now:timeout:)`` closes.
            inputClosed = true
            deliverBatch()
            messages.finish()
            if closeSent { context.close(promise: nil) }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        deliverBatch()
        messages.finish()
        cancelCloseTimer()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        deliverBatch()
        messages.finish(throwing: error)
        // TLS and socket errors end the connection (framing errors are this handler's own: see
        // ``fail(_:_:_:)``).
        context.close(promise: nil)
    }

    /// Fails the connection (RFC 6455 section 7.1.7): the close frame, the error to the consumer
    /// after what came before it, and the TCP connection closed once the frame is written.
    private func fail(_ code: UInt16, _ error: RealtimeError, _ context: ChannelHandlerContext) {
        // Nothing after the error is parsed: the connection ends once the close frame is out.
        unparsable = true
        assembler.reset()
        deliverBatch()
        messages.finish(throwing: error)
        guard !closeSent else {
            context.close(promise: nil)
            return
        }
        closeSent = true
        let promise = context.eventLoop.makePromise(of: Void.self)
        write(Self.closeFrame(code: code, reason: nil, allocator: context.channel.allocator), context, promise: promise)
        promise.futureResult.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
    }

    // MARK: Outbound

    func read(context: ChannelHandlerContext) {
        if paused {
            readHeld = true
        } else {
            context.read()
        }
    }

    private func resumeReading() {
        paused = false
        guard readHeld, let context else { return }
        readHeld = false
        context.read()
    }

    private func write(_ frame: WebSocketFrame, _ context: ChannelHandlerContext, promise: EventLoopPromise<Void>? = nil) {
        var frame = frame
        frame.maskKey = keys.next()
        context.writeAndFlush(wrapOutboundOut(frame), promise: promise)
    }

    static func closeFrame(code: UInt16, reason: String?, allocator: ByteBufferAllocator) -> WebSocketFrame {
        var buffer = allocator.buffer(capacity: 2 + (reason?.utf8.count ?? 0))
        buffer.writeInteger(code)
        if let reason { buffer.writeString(reason) }
        return WebSocketFrame(fin: true, opcode: .connectionClose, data: buffer)
    }

    /// Writes our close frame unless one went out already; `promise` completes when it is written.
    func sendClose(code: UInt16, reason: String?, _ context: ChannelHandlerContext, promise: EventLoopPromise<Void>? = nil) {
        guard !closeSent else {
            promise?.succeed(())
            return
        }
        closeSent = true
        write(Self.closeFrame(code: code, reason: reason, allocator: context.channel.allocator), context, promise: promise)
    }

    /// The end of a connection whose consumer is done: our close frame (`code`) unless the handshake
    /// already had one, then the TCP connection closed at once (`now`), when the server closes it,
    /// or after `timeout` at the latest.
    func finish(code: UInt16, now: Bool, timeout: Duration) {
        guard let context, context.channel.isActive else { return }
        // The consumer is done: what waits for it is let go, and reading goes on for the server's
        // answer even if it was held for the consumer.
        assembler.reset()
        batch = []
        messages.finish()
        messages.discardBuffered()
        resumeReading()
        sendClose(code: code, reason: nil, context)
        // After the server's close frame (as swift-websocket's handler did) or its FIN, the TCP
        // connection is closed at once; after ours, the server's answer and its FIN are waited for.
        if now || closeReceived != nil || inputClosed {
            context.close(promise: nil)
            return
        }
        armCloseTimer(timeout, context)
    }

    /// Our close frame is out: the TCP connection is closed after `timeout` unless the server
    /// closed it first (a peer, or a proxy, that never answers the close frame).
    func armCloseTimer(_ timeout: Duration, _ context: ChannelHandlerContext) {
        guard closeTimer == nil else { return }
        let channel = context.channel
        closeTimer = timers.schedule(after: timeout) { channel.close(promise: nil) }
    }

    private func cancelCloseTimer() {
        guard let timer = closeTimer else { return }
        closeTimer = nil
        _ = timers.cancel(timer)
    }
}

/// The transport's hold on a ``WebSocketReadHandler`` from any thread.
struct WebSocketLoopReader: Sendable {
    private let handler: NIOLoopBound<WebSocketReadHandler>
    let messages: InboundBuffer<WebSocketInbound>
    let channel: any Channel

    init(_ handler: WebSocketReadHandler, channel: any Channel) {
        self.handler = NIOLoopBound(handler, eventLoop: channel.eventLoop)
        self.messages = handler.messages
        self.channel = channel
    }

    /// Starts the closing handshake: returns once our close frame is written (at once if one was).
    /// The TCP connection is closed `timeout` later if the server has not closed it by then.
    func close(code: UInt16, reason: String?, timeout: Duration) async throws {
        let promise = channel.eventLoop.makePromise(of: Void.self)
        let handler = handler
        channel.eventLoop.execute {
            guard let context = handler.value.contextIfActive else {
                promise.fail(RealtimeError(.connectionClosed, "the WebSocket is closed"))
                return
            }
            handler.value.sendClose(code: code, reason: reason, context, promise: promise)
            handler.value.armCloseTimer(timeout, context)
        }
        try await promise.futureResult.get()
    }

    /// Ends the connection now, from any thread (the task running it was cancelled): our close
    /// frame (1000) unless one went out, then the TCP connection closed.
    func abort() {
        let handler = handler
        channel.eventLoop.execute { handler.value.finish(code: 1000, now: true, timeout: .zero) }
    }

    /// Ends the connection after its consumer is done (see ``WebSocketReadHandler/finish(code:now:timeout:)``)
    /// and returns the server's close frame, if one came. Cancellation closes the TCP connection at once.
    func finish(code: UInt16, timeout: Duration) async -> WebSocketCloseInfo? {
        let handler = handler
        let now = Task.isCancelled
        channel.eventLoop.execute {
            handler.value.finish(code: code, now: now, timeout: timeout)
        }
        let channel = channel
        await withTaskCancellationHandler {
            try? await channel.closeFuture.get()
        } onCancel: {
            channel.close(promise: nil)
        }
        return try? await channel.eventLoop.submit { handler.value.closeReceived }.get()
    }
}

extension WebSocketReadHandler {
    /// The context while the channel is open.
    var contextIfActive: ChannelHandlerContext? {
        guard let context, context.channel.isActive else { return nil }
        return context
    }
}

/// Reassembles messages from data frames (RFC 6455 section 5.4), with the size limit checked as each
/// frame arrives and text checked for UTF-8 when the message is whole. Used by both frame paths:
/// ``WebSocketReadHandler`` and, for compressed connections, ``WebSocketMessages``.
struct MessageAssembler {
    enum Step {
        /// A fragment: the message is not whole yet.
        case partial
        case message(WebSocketInbound)
        /// The connection must fail with the error's close code.
        case failure(RealtimeError)
    }

    let maxMessageSize: Int
    let validateUTF8: Bool
    private var partial: (opcode: WebSocketOpcode, data: ByteBuffer)?

    init(maxMessageSize: Int, validateUTF8: Bool) {
        self.maxMessageSize = maxMessageSize
        self.validateUTF8 = validateUTF8
    }

    /// Drops a message under way.
    mutating func reset() { partial = nil }

    /// A fragmented message is under way: the next data frame must continue it.
    var isUnderWay: Bool { partial != nil }

    /// `validText`: for a text frame that is a whole message, whether its UTF-8 is valid, when
    /// the frame parser checked it; else nil, and it is checked here.
    mutating func add(opcode: WebSocketOpcode, fin: Bool, data: ByteBuffer, validText: Bool? = nil) -> Step {
        var message: (opcode: WebSocketOpcode, data: ByteBuffer)
        if case .none = partial, opcode == .text || opcode == .binary {
            // A message's first frame (most messages are one): told without copying `partial`
            // into a tuple to switch on.
            message = (opcode, data)
        } else {
            switch (opcode, partial) {
            case (.continuation, .some(let started)):
                partial = nil
                message = started
                message.data.writeImmutableBuffer(data)
            case (.continuation, nil):
                return .failure(RealtimeError(.protocolViolation, "the server sent a continuation frame outside a message", closeCode: 1002))
            default:
                partial = nil
                return .failure(RealtimeError(.protocolViolation, "the server interleaved WebSocket message fragments", closeCode: 1002))
            }
        }
        guard message.data.readableBytes <= maxMessageSize else {
            return .failure(
                RealtimeError(.messageTooLarge, "the server sent a message of more than \(maxMessageSize) bytes (maxMessageSize)", closeCode: 1009))
        }
        guard fin else {
            partial = message
            return .partial
        }
        if message.opcode == .binary { return .message(.binary(message.data)) }
        guard !validateUTF8 || (validText ?? message.data.withUnsafeReadableBytes(isValidUTF8)) else {
            return .failure(RealtimeError(.invalidUTF8, "the server sent a text message that is not valid UTF-8", closeCode: 1007))
        }
        return .message(.text(message.data))
    }
}
