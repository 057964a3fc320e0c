import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket

/// The rule of a client WebSocket's keep-alive, as a value: every `interval` it looks at what the
/// connection heard since the last look.
///
/// - Something arrived (any frame, a pong among them): the peer is alive, nothing to send.
/// - Nothing arrived and no ping is out: send a ping.
/// - Nothing arrived since the ping went out: the peer is gone; close.
/// - Nothing arrived because we stopped reading (the consumer is behind): the silence is ours, so
///   neither a ping nor a verdict.
///
/// So a silent peer is found within three intervals, a busy connection sends no pings, and a slow
/// consumer is never taken for a dead peer.
package struct WebSocketKeepAliveRule: Sendable, Equatable {
    package enum Action: Sendable, Equatable {
        case none
        case sendPing
        case close
    }

    private var heard = true
    private var pingOut = false

    package init() {}

    /// A frame arrived.
    package mutating func received() {
        heard = true
        pingOut = false
    }

    /// Reading starts or resumes after the consumer caught up: what the peer sent meanwhile is
    /// about to be read, so the next interval does not count as silence.
    package mutating func readingResumed() {
        heard = true
    }

    /// An interval passed; `reading` says whether the channel was waiting for bytes (not paused by
    /// its consumer).
    package mutating func tick(reading: Bool) -> Action {
        if heard {
            heard = false
            return .none
        }
        guard reading else { return .none }
        if pingOut { return .close }
        pingOut = true
        return .sendPing
    }
}

/// Pings sent and pongs received by one connection's keep-alive (for tests that move a manual clock:
/// the answer to a ping travels in real time).
package struct WebSocketKeepAliveCounts: Sendable, Equatable {
    package var pings = 0
    package var pongs = 0
}

/// Keeps a client WebSocket alive on the runtime's timer queue (``WebSocketKeepAliveRule``): no task
/// per connection, one heap entry per interval; the ping is written on the channel's event loop.
/// When the peer stays silent the channel is closed and ``ProtocolErrorRecorder``'s box gets a
/// `timeout` error, which the transport reports.
final class WebSocketKeepAlive: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private let interval: Duration
    private let timers: TimerQueue
    private let failure: ProtocolErrorRecorder.Box
    private let counts: NIOLockedValueBox<WebSocketKeepAliveCounts>
    private var rule = WebSocketKeepAliveRule()
    private var timer: TimerQueue.Timer?
    private var context: ChannelHandlerContext?
    /// A `read` passed towards the socket and no bytes came since: the channel waits for the peer.
    /// True when the handler is added: the channel reads automatically, and the read that followed
    /// the upgrade response is outstanding (a consumer's backpressure holds later ones above us).
    private var reading = true

    /// Frames pass this handler (a compressed connection); false: the bytes of each read.
    private let framesInbound: Bool

    init(
        interval: Duration, timers: TimerQueue, failure: ProtocolErrorRecorder.Box, counts: NIOLockedValueBox<WebSocketKeepAliveCounts>,
        framesInbound: Bool = true
    ) {
        self.framesInbound = framesInbound
        self.interval = interval
        self.timers = timers
        self.failure = failure
        self.counts = counts
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        arm(context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        stop()
    }

    func channelInactive(context: ChannelHandlerContext) {
        stop()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        rule.received()
        // Pongs answer our pings: nobody above asked for them. On an uncompressed connection
        // bytes pass here, and the reader counts the pongs.
        if framesInbound, unwrapInboundIn(data).opcode == .pong {
            counts.withLockedValue { $0.pongs += 1 }
            return
        }
        context.fireChannelRead(data)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        reading = false
        context.fireChannelReadComplete()
    }

    func read(context: ChannelHandlerContext) {
        if !reading {
            reading = true
            rule.readingResumed()
        }
        context.read()
    }

    private func stop() {
        if let timer { timers.cancel(timer) }
        timer = nil
        context = nil
    }

    private func arm(_ context: ChannelHandlerContext) {
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        let eventLoop = context.eventLoop
        timer = timers.schedule(after: interval) {
            eventLoop.execute { handler.value.tick() }
        }
    }

    private func tick() {
        guard let context else { return }
        switch rule.tick(reading: reading) {
        case .none:
            break
        case .sendPing:
            var payload = context.channel.allocator.buffer(capacity: 8)
            payload.writeInteger(UInt64.random(in: .min ... .max))
            let frame = WebSocketFrame(fin: true, opcode: .ping, maskKey: .random(), data: payload)
            counts.withLockedValue { $0.pings += 1 }
            context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
        case .close:
            let interval = interval
            failure.withLockedValue {
                if $0 == nil { $0 = RealtimeError(.timeout, "the WebSocket peer answered nothing for \(interval) after a ping", stage: .established) }
            }
            self.context = nil
            timer = nil
            context.close(promise: nil)
            return
        }
        arm(context)
    }
}

/// A protocol's own keep-alive message on a WebSocket (SignalR's Ping, Engine.IO's ping and pong),
/// handled on the channel's event loop so an idle connection costs no task wake-up per message.
///
/// A frame whose payload is exactly ``peerPing`` (one whole, uncompressed frame of that kind) is
/// consumed there when ``received`` (called on the event loop) says so: ``reply`` is written if
/// set, and the frame never reaches the reader. Anything else (the same message inside a larger frame, other
/// spacing) takes the normal path, so the shortcut changes no meaning. ``WebSocketConnection/sendProtocolPing()``
/// writes ``ownPing`` from any thread without waiting.
package struct WebSocketProtocolPing: Sendable {
    /// A whole message: its bytes and whether it goes in a binary frame.
    package struct Message: Sendable, Equatable {
        package var bytes: [UInt8]
        package var binary: Bool
        package init(_ bytes: [UInt8], binary: Bool) {
            self.bytes = bytes
            self.binary = binary
        }
    }

    /// The peer's keep-alive message, consumed on the event loop.
    package var peerPing: Message?
    /// Written at once when ``peerPing`` arrives.
    package var reply: Message?
    /// Our own keep-alive message, written by ``WebSocketConnection/sendProtocolPing()``.
    package var ownPing: Message?
    /// Called on the event loop for each ``peerPing``; true: handled here, false: the frame goes on
    /// to the reader like any other. It must not block.
    package var received: @Sendable () -> Bool

    package init(peerPing: Message?, reply: Message? = nil, ownPing: Message?, received: @escaping @Sendable () -> Bool) {
        self.peerPing = peerPing
        self.reply = reply
        self.ownPing = ownPing
        self.received = received
    }
}

/// Writes a connection's own protocol ping from any thread (``WebSocketProtocolPing``).
package final class ProtocolPingSender: Sendable {
    private let handler: NIOLoopBound<ProtocolPingHandler>
    private let eventLoop: any EventLoop

    fileprivate init(_ handler: ProtocolPingHandler, eventLoop: any EventLoop) {
        self.handler = NIOLoopBound(handler, eventLoop: eventLoop)
        self.eventLoop = eventLoop
    }

    /// Writes the ping on the event loop; nothing once our close frame went out or the channel closed.
    func send() {
        if eventLoop.inEventLoop {
            handler.value.writeOwnPing()
        } else {
            let handler = handler
            eventLoop.execute { handler.value.writeOwnPing() }
        }
    }
}

/// The channel handler behind ``WebSocketProtocolPing``, between the frame encoder and the reader (which, on an
/// uncompressed connection, offers it each frame that may be the peer's ping).
final class ProtocolPingHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private let rule: WebSocketProtocolPing
    /// Frames pass this handler (a compressed connection, read by swift-websocket's handler);
    /// false: bytes pass it, and ``WebSocketReadHandler`` offers it each frame that may be the ping
    /// (``consumedPeerPing(opcode:compressed:data:)``).
    private let interceptsFrames: Bool
    private var context: ChannelHandlerContext?
    /// A fragmented message is being received: a frame now is one of its parts.
    private var inMessage = false
    /// What went out: our close frame (nothing may follow it), a fragmented message under way (a
    /// frame of ours now would break it, so it waits).
    private var sent = OutboundFrameTracker()
    private var waiting: [WebSocketProtocolPing.Message] = []

    init(_ rule: WebSocketProtocolPing, interceptsFrames: Bool = true) {
        self.rule = rule
        self.interceptsFrames = interceptsFrames
    }

    /// Made on the event loop when the handler is added, for ``WebSocketConnection``.
    func sender(on eventLoop: any EventLoop) -> ProtocolPingSender { ProtocolPingSender(self, eventLoop: eventLoop) }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func channelInactive(context: ChannelHandlerContext) {
        self.context = nil
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard interceptsFrames else {
            context.fireChannelRead(data)
            return
        }
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .binary:
            if !inMessage, frame.fin, consumedPeerPing(opcode: frame.opcode, compressed: frame.rsv1, data: frame.data) { return }
            inMessage = !frame.fin
        case .continuation:
            inMessage = !frame.fin
        default:
            break
        }
        context.fireChannelRead(data)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        sent.wrote(unwrapOutboundIn(data))
        context.write(data, promise: promise)
        if !sent.inMessage, !waiting.isEmpty {
            let messages = waiting
            waiting = []
            for message in messages { write(message, context) }
        }
    }

    /// Whether a data frame, whole (FIN) and outside a fragmented message, is the peer's ping and was
    /// handled here (the reply written): then it goes no further.
    func consumedPeerPing(opcode: WebSocketOpcode, compressed: Bool, data: ByteBuffer) -> Bool {
        guard let ping = rule.peerPing, let context, Self.matches(opcode, compressed, data, ping), rule.received() else { return false }
        if let reply = rule.reply { write(reply, context) }
        return true
    }

    fileprivate func writeOwnPing() {
        guard let context, let ping = rule.ownPing else { return }
        write(ping, context)
    }

    private func write(_ message: WebSocketProtocolPing.Message, _ context: ChannelHandlerContext) {
        guard !sent.closeSent else { return }
        guard !sent.inMessage else {
            if !waiting.contains(message) { waiting.append(message) }
            return
        }
        var payload = context.channel.allocator.buffer(capacity: message.bytes.count)
        payload.writeBytes(message.bytes)
        let frame = WebSocketFrame(fin: true, opcode: message.binary ? .binary : .text, maskKey: .random(), data: payload)
        context.writeAndFlush(wrapOutboundOut(frame), promise: nil)
    }

    private static func matches(
        _ opcode: WebSocketOpcode, _ compressed: Bool, _ data: ByteBuffer, _ message: WebSocketProtocolPing.Message
    ) -> Bool {
        // A compressed frame (RSV1, permessage-deflate) carries other bytes than the message.
        guard !compressed, (opcode == .binary) == message.binary, data.readableBytes == message.bytes.count else { return false }
        return data.readableBytesView.elementsEqual(message.bytes)
    }
}
