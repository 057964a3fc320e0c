import HTTPTypes
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import WSCompression
import WSCore

/// Opens a WebSocket client channel: TCP, TLS, the HTTP/1.1 upgrade, and the frame codec.
///
/// The pieces are swift-nio's (`ClientBootstrap`, `NIOSSLClientHandler`, the typed HTTP client
/// upgrade handler) with our ``WebSocketClientUpgrader``, ``MaskingFrameEncoder`` and, on an
/// uncompressed connection, ``WebSocketReadHandler`` reading the bytes itself (a compressed one
/// has swift-nio's `WebSocketFrameDecoder` and swift-websocket's handler); the policy is ours: no `Origin` unless configured,
/// no SNI for IP literals, pinning inside the handshake (``TLSPinGate``), cookies, a readable
/// upgrade response, a typed error with the status and a body excerpt for a refused upgrade, and
/// every failure path closes the channel it opened.
///
/// A class: the connection's task keeps it across the connection's life, and a reference costs
/// that task's frames 8 bytes where the value (the configuration, the target, the TLS context)
/// cost hundreds.
final class WebSocketClientChannel: Sendable {
    enum Outcome: Sendable {
        case upgraded(Upgraded, WebSocketUpgradeResponse, [any WebSocketExtension])
        case refused(EventLoopFuture<RefusedUpgradeCollector.Response>)
    }

    /// Who runs the frame protocol of an upgraded channel.
    enum Upgraded: Sendable {
        /// Ours, on the event loop (``WebSocketReadHandler``): every connection without extensions.
        case loop(WebSocketLoopReader)
        /// swift-websocket's handler, through an `NIOAsyncChannel`: a connection with
        /// permessage-deflate, whose extension API is asynchronous.
        case frames(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>)
    }

    /// The largest part of a refused upgrade's body kept for the error.
    static let refusedBodyExcerpt = 512

    let target: Endpoint
    let url: String
    let configuration: WebSocketConfiguration
    let sslContext: NIOSSLContext?
    let extensionBuilders: [any WebSocketExtensionBuilder]
    /// The first WebSocket protocol error seen on the channel (an oversized frame, bad framing): the frame
    /// stream may end before that error reaches the reader, so the transport reports it from here.
    let protocolError = ProtocolErrorRecorder.Box(nil)
    /// The keep-alive's pings and pongs.
    let keepAliveCounts = NIOLockedValueBox(WebSocketKeepAliveCounts())
    /// Writes the protocol's own ping (``WebSocketProtocolPing``), once the channel is upgraded.
    let protocolPingSender = NIOLockedValueBox<ProtocolPingSender?>(nil)
    /// Writes whole messages on the event loop (``WebSocketLoopWriter``), once the channel is
    /// upgraded without extensions (a compressed connection's frames go through swift-websocket's writer).
    let loopWriter = NIOLockedValueBox<WebSocketLoopWriter?>(nil)

    /// The runtime's timer queue, for the keep-alive (``WebSocketKeepAlive``).
    let timers: TimerQueue
    /// The proxy the connection goes through (nil: straight to the server).
    let proxy: ProxyServer?

    init(url: String, configuration: WebSocketConfiguration, timers: TimerQueue, proxy: ProxyConfiguration) throws {
        self.url = url
        self.timers = timers
        self.target = try Endpoint(url, allowedSchemes: ["ws", "wss", "http", "https"])
        self.proxy = try proxy.server(for: target)
        self.configuration = configuration
        sslContext = target.isSecure ? try configuration.tls.sslContext() : nil
        extensionBuilders =
            configuration.compression
            ? [WebSocketExtensionFactory.perMessageDeflate(maxDecompressedFrameSize: configuration.maxMessageSize).build()] : []
    }

    /// Connects and upgrades. The returned channel is open and upgraded; on any error nothing is
    /// left open. Cancellation closes the channel being set up.
    func open(on eventLoop: any EventLoop) async throws -> (Upgraded, WebSocketUpgradeResponse, [any WebSocketExtension]) {
        let bootstrap = SocketConnection.bootstrap(on: eventLoop, connectTimeout: configuration.connectTimeout, allowRemoteHalfClosure: true)
        let custody = UpgradedChannelCustody()
        let (channel, upgrade): (any Channel, EventLoopFuture<Outcome>)
        if let proxy {
            (channel, upgrade) = try await connect(bootstrap, through: proxy, custody: custody)
        } else {
            (channel, upgrade) = try await SocketConnection.connect(bootstrap, host: target.host, port: target.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    (channel, try self.configure(channel, custody: custody))
                }
            }
        }
        do {
            // Cancellation (the caller's, or the connect deadline's) closes the channel, which ends
            // both waits below: the upgrade, and a refused upgrade's body from a stalled server.
            return try await withTaskCancellationHandler {
                switch try await upgrade.get() {
                case .upgraded(let upgraded, let response, let extensions):
                    if Task.isCancelled { throw CancellationError() }
                    custody.claim()
                    return (upgraded, response, extensions)
                case .refused(let collected):
                    let response = try await collected.get()
                    throw RealtimeError.badStatus(response.head.status, url: url, body: response.bodyExcerpt)
                }
            } onCancel: {
                channel.close(promise: nil)
            }
        } catch {
            channel.close(promise: nil)
            custody.abandon()
            throw error
        }
    }

    /// Connects to `proxy`, opens a tunnel to the server through it, then builds the connection's
    /// pipeline on the open tunnel (TLS to the server runs inside it).
    private func connect(
        _ bootstrap: ClientBootstrap, through proxy: ProxyServer, custody: UpgradedChannelCustody
    ) async throws -> (any Channel, EventLoopFuture<Outcome>) {
        let (target, url) = (self.target, self.url)
        let (channel, tunnel): (any Channel, EventLoopFuture<Void>)
        do {
            (channel, tunnel) = try await SocketConnection.connect(bootstrap, host: proxy.host, port: proxy.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    (channel, try ProxyTunnel.install(through: proxy, to: target.host, port: target.port, url: url, on: channel))
                }
            }
        } catch {
            throw ProxyTunnel.mapError(error, proxy: proxy, url: url) ?? error
        }
        do {
            try await withTaskCancellationHandler {
                try await tunnel.get()
            } onCancel: {
                channel.close(promise: nil)
            }
            let upgrade = try await channel.eventLoop.submit { try self.configure(channel, custody: custody) }.get()
            return (channel, upgrade)
        } catch {
            channel.close(promise: nil)
            throw error
        }
    }

    /// Holds the upgraded `NIOAsyncChannel` from the moment the upgrade makes it until ``open(on:)``
    /// claims it, and discards it if `open` gives up first. NIO's typed upgrade handler drops a
    /// finished upgrade's value when the connection closed or failed meanwhile (its result promise
    /// was already failed); dropping an `NIOAsyncChannel` unfinished traps in debug builds
    /// ("Deinited NIOAsyncWriter without calling finish()", seen in CI with connections cut during
    /// the upgrade).
    final class UpgradedChannelCustody: Sendable {
        private enum State {
            case empty
            case holding(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>)
            case claimed
            case abandoned
        }
        private let state = NIOLockedValueBox(State.empty)

        /// The upgrade made `channel` (on the event loop).
        func hold(_ channel: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>) {
            let orphan = state.withLockedValue { state -> NIOAsyncChannel<WebSocketFrame, WebSocketFrame>? in
                guard case .empty = state else { return channel }
                state = .holding(channel)
                return nil
            }
            // A channel nobody will use is finished off in a short task (finishing it is async).
            if let orphan { Task { await WebSocketClientChannel.discard(orphan) } }
        }

        /// `open` hands the channel to its caller, who finishes it.
        func claim() {
            state.withLockedValue { $0 = .claimed }
        }

        /// `open` failed: a channel made (now or later) is finished here.
        func abandon() {
            let orphan = state.withLockedValue { state -> NIOAsyncChannel<WebSocketFrame, WebSocketFrame>? in
                defer { state = .abandoned }
                if case .holding(let channel) = state { return channel }
                return nil
            }
            // As in hold(_:): finishing the orphan is async.
            if let orphan { Task { await WebSocketClientChannel.discard(orphan) } }
        }
    }

    /// Closes an upgraded channel nobody will use. An `NIOAsyncChannel` must be finished through
    /// `executeThenClose`: dropping it unused traps in debug builds ("Deinited NIOAsyncWriter
    /// without calling finish()"), which a connect timeout or a cancellation racing the upgrade did.
    static func discard(_ asyncChannel: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>) async {
        try? await asyncChannel.executeThenClose { _, outbound in outbound.finish() }
    }

    /// Closes an upgraded channel nobody will use, whoever runs its frames.
    static func discard(_ upgraded: Upgraded) async {
        switch upgraded {
        case .frames(let asyncChannel): await discard(asyncChannel)
        case .loop(let reader): try? await reader.channel.close()
        }
    }

    /// Builds the pipeline; runs on the channel's event loop before it connects.
    private func configure(_ channel: any Channel, custody: UpgradedChannelCustody) throws -> EventLoopFuture<Outcome> {
        let pipeline = channel.pipeline.syncOperations
        if let sslContext {
            try SocketConnection.addTLS(
                to: pipeline, context: sslContext, serverName: configuration.tls.serverName ?? target.host,
                pins: configuration.tls.pinnedPublicKeySHA256)
        }
        try pipeline.addHandler(FlushCoalescingHandler())
        let halfClosure = NIOLoopBound(HalfClosureGate(), eventLoop: channel.eventLoop)
        try pipeline.addHandler(halfClosure.value)

        let requestURL = url
        let cookies = configuration.cookies
        let offeredProtocols = configuration.subprotocols
        let builders = extensionBuilders
        let recorded = protocolError
        let (keepAlive, timers, counts) = (configuration.autoPing, timers, keepAliveCounts)
        let (protocolPing, pingSender, loopWriter) = (configuration.protocolPing, protocolPingSender, loopWriter)
        let (maxMessageSize, validateUTF8) = (configuration.maxMessageSize, configuration.validateUTF8)
        let upgrader = WebSocketClientUpgrader<Outcome>(
            maxFrameSize: max(configuration.maxMessageSize, 125),
            upgradeAccepted: { halfClosure.value.upgradeAccepted() },
            decodesFrames: { head in Self.readsFrames(builders, head) },
            upgradePipelineHandler: { channel, head in
                channel.eventLoop.makeCompletedFuture {
                    cookies?.record(head.headers, from: requestURL)
                    // The connection keeps the response for its whole life: a copy the size of its
                    // headers, not the decoder's array (room for 16 headers, about 570 bytes).
                    let response = WebSocketUpgradeResponse(status: head.status, headers: HTTPHeaders(head.headers.map { ($0.name, $0.value) }))
                    if let chosen = response.subprotocol, !offeredProtocols.contains(chosen) {
                        throw RealtimeError(.protocolViolation, "the server chose the subprotocol \(chosen), which was not offered")
                    }
                    let offeredNames = Set(builders.map { type(of: $0).name })
                    if let unknown = response.extensions.first(where: { !offeredNames.contains($0) }) {
                        throw RealtimeError(.protocolViolation, "the server enabled the extension \(unknown), which was not offered")
                    }
                    let extensions = try builders.buildClientExtensions(from: HTTPFields(head.headers))
                    // Without extensions the reader takes the bytes (no frame decoder was added):
                    // the handlers before it see each read's bytes, and it gives them their frames.
                    let readsFrames = Self.readsFrames(builders, head)
                    if readsFrames { try channel.pipeline.syncOperations.addHandler(ProtocolErrorRecorder(box: recorded)) }
                    if let interval = keepAlive {
                        try channel.pipeline.syncOperations.addHandler(
                            WebSocketKeepAlive(interval: interval, timers: timers, failure: recorded, counts: counts, framesInbound: readsFrames))
                    }
                    var pingHandler: ProtocolPingHandler?
                    if let protocolPing {
                        let handler = ProtocolPingHandler(protocolPing, interceptsFrames: readsFrames)
                        try channel.pipeline.syncOperations.addHandler(handler)
                        pingSender.withLockedValue { $0 = handler.sender(on: channel.eventLoop) }
                        pingHandler = handler
                    }
                    if !readsFrames {
                        let handler = LoopWriteHandler()
                        try channel.pipeline.syncOperations.addHandler(handler)
                        loopWriter.withLockedValue { $0 = handler.writer(on: channel.eventLoop) }
                        let reader = WebSocketReadHandler(maxMessageSize: maxMessageSize, validateUTF8: validateUTF8, timers: timers)
                        reader.protocolPing = pingHandler
                        reader.keepAliveCounts = keepAlive == nil ? nil : counts
                        try channel.pipeline.syncOperations.addHandler(reader)
                        halfClosure.value.upgradeCompleted()
                        return .upgraded(.loop(WebSocketLoopReader(reader, channel: channel)), response, extensions)
                    }
                    let asyncChannel = try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(wrappingChannelSynchronously: channel)
                    custody.hold(asyncChannel)
                    halfClosure.value.upgradeCompleted()
                    return .upgraded(.frames(asyncChannel), response, extensions)
                }
            }
        )
        let upgradeConfiguration = NIOTypedHTTPClientUpgradeConfiguration<Outcome>(
            upgradeRequestHead: requestHead(),
            upgraders: [upgrader],
            notUpgradingCompletionHandler: { channel in
                channel.eventLoop.makeCompletedFuture {
                    let collector = RefusedUpgradeCollector(
                        limit: Self.refusedBodyExcerpt, promise: channel.eventLoop.makePromise(), cookies: cookies, url: requestURL)
                    try channel.pipeline.syncOperations.addHandler(collector)
                    return .refused(collector.promise.futureResult)
                }
            }
        )
        var pipelineConfiguration = NIOUpgradableHTTPClientPipelineConfiguration(upgradeConfiguration: upgradeConfiguration)
        pipelineConfiguration.leftOverBytesStrategy = .forwardBytes
        return try pipeline.configureUpgradableHTTPClientPipeline(configuration: pipelineConfiguration)
    }

    /// Whether swift-nio's frame decoder and swift-websocket's handler read the connection: when
    /// extensions were offered and the server's answer names some (permessage-deflate). Else our
    /// ``WebSocketReadHandler`` reads its bytes.
    private static func readsFrames(_ builders: [any WebSocketExtensionBuilder], _ head: NIOHTTP1.HTTPResponseHead) -> Bool {
        !builders.isEmpty && head.headers.contains(name: "Sec-WebSocket-Extensions")
    }

    private func requestHead() -> HTTPRequestHead {
        var headers = HTTPHeaders()
        let hostPart = target.host.contains(":") ? "[\(target.host)]" : target.host
        let defaultPort = target.isSecure ? 443 : 80
        headers.add(name: "Host", value: target.port == defaultPort ? hostPart : "\(hostPart):\(target.port)")
        if let origin = configuration.origin { headers.add(name: "Origin", value: origin) }
        for (name, value) in configuration.headers where !Self.reservedHeaders.contains(name.lowercased()) {
            headers.add(name: name, value: value)
        }
        if !configuration.subprotocols.isEmpty {
            headers.add(name: "Sec-WebSocket-Protocol", value: configuration.subprotocols.joined(separator: ", "))
        }
        for builder in extensionBuilders {
            let offer = builder.clientRequestHeader()
            if !offer.isEmpty { headers.add(name: "Sec-WebSocket-Extensions", value: offer) }
        }
        configuration.cookies?.apply(to: &headers, url: url)
        return HTTPRequestHead(version: .http1_1, method: .GET, uri: target.pathAndQuery, headers: headers)
    }

    /// Headers the upgrade sets itself; a caller's copies would corrupt the handshake.
    private static let reservedHeaders: Set<String> = [
        "host", "connection", "upgrade", "sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
        "content-length", "transfer-encoding",
    ]
}

/// Holds back the server's half-closure (a TCP FIN: `ChannelEvent.inputClosed`; connections are
/// opened with `allowRemoteHalfClosure`) while swift-nio completes an accepted upgrade, and passes it
/// on once the WebSocket pipeline and its reader are in place.
///
/// The typed upgrade handler finishes an upgrade some turns of the event loop after the 101 was
/// read. A FIN arriving in between went through the pipeline too early: the HTTP decoder, still
/// being removed, consumed the bytes that followed the 101 (frames the server sent before closing,
/// such as a close frame with its reason), and the event passed before the `NIOAsyncChannel` reader
/// existed, which then waited for the 30 s auto-ping. Both seen in `WebSocketUpgradeRaceTests`.
///
/// Before the server accepts the upgrade the event passes at once (a refused upgrade's body may end
/// at the FIN) and the connection is closed: an upgrade the server closed before answering fails
/// now instead of at the connect timeout. Once the upgrade is complete and the upgrade handler has
/// delivered the bytes it buffered, the gate lets a held FIN through and removes itself.
final class HalfClosureGate: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    /// How many turns of the event loop to wait for the upgrade handler to leave before letting a
    /// held FIN through anyway.
    static let maxTurns = 64
    private enum State { case handshake, upgrading(held: Bool), released }
    private var state = State.handshake
    private var context: ChannelHandlerContext?

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) { self.context = nil }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard case .some(.inputClosed) = event as? ChannelEvent else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        switch state {
        case .upgrading:
            state = .upgrading(held: true)
        case .handshake:
            // The server closed before accepting the upgrade. The HTTP decoder takes the FIN first
            // (a refused response whose body ends with it is complete then); nothing else would
            // end the upgrade, so the connection closes and the connect fails now, not at its timeout.
            context.fireUserInboundEventTriggered(event)
            context.close(promise: nil)
        case .released:
            context.fireUserInboundEventTriggered(event)
        }
    }

    /// The server's 101 was accepted (on the event loop, while its head is being decoded).
    func upgradeAccepted() {
        if case .handshake = state { state = .upgrading(held: false) }
    }

    /// The upgrade built the WebSocket pipeline and its reader (on the event loop).
    func upgradeCompleted() {
        guard let context else { return }
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        context.eventLoop.execute { loopBound.value.releaseAfterUpgradeHandler(turns: 0) }
    }

    private func releaseAfterUpgradeHandler(turns: Int) {
        guard let context else { return }
        let upgradeHandlerPresent =
            (try? context.pipeline.syncOperations.context(
                handlerType: NIOTypedHTTPClientUpgradeHandler<WebSocketClientChannel.Outcome>.self)) != nil
        if upgradeHandlerPresent, turns < Self.maxTurns {
            let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
            context.eventLoop.execute { loopBound.value.releaseAfterUpgradeHandler(turns: turns + 1) }
            return
        }
        let held = if case .upgrading(held: true) = state { true } else { false }
        state = .released
        if held { context.fireUserInboundEventTriggered(ChannelEvent.inputClosed) }
        context.pipeline.syncOperations.removeHandler(self, promise: nil)
    }
}

/// Keeps the first WebSocket protocol error raised in the frame pipeline (swift-nio's frame decoder:
/// an oversized frame, bad framing) and passes every error on.
final class ProtocolErrorRecorder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    typealias Box = NIOLockedValueBox<(any Error)?>
    let box: Box

    init(box: Box) { self.box = box }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOWebSocketError { box.withLockedValue { if $0 == nil { $0 = error } } }
        context.fireErrorCaught(error)
    }
}

/// Reads the head and the start of the body of a response that refused the upgrade, for the error.
final class RefusedUpgradeCollector: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart

    struct Response: Sendable {
        var head: NIOHTTP1.HTTPResponseHead
        var body: ByteBuffer

        var bodyExcerpt: String? {
            guard body.readableBytes > 0 else { return nil }
            return String(decoding: body.readableBytesView, as: UTF8.self)
        }
    }

    let promise: EventLoopPromise<Response>
    private let limit: Int
    private let cookies: CookieStore?
    private let url: String
    private var head: NIOHTTP1.HTTPResponseHead?
    private var body = ByteBuffer()
    private var finished = false

    init(limit: Int, promise: EventLoopPromise<Response>, cookies: CookieStore?, url: String) {
        self.limit = limit
        self.promise = promise
        self.cookies = cookies
        self.url = url
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            cookies?.record(head.headers, from: url)
        case .body(var part):
            let room = limit - body.readableBytes
            if room > 0, let slice = part.readSlice(length: min(room, part.readableBytes)) {
                body.writeImmutableBuffer(slice)
            }
            if body.readableBytes >= limit { finish() }
        case .end:
            finish()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        finish()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        finish()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        finish()
    }

    private func finish() {
        guard !finished else { return }
        finished = true
        guard let head else {
            promise.fail(RealtimeError(.connectionClosed, "the server closed the connection during the WebSocket upgrade"))
            return
        }
        promise.succeed(Response(head: head, body: body))
    }
}

/// Coalesces flushes, so frames written in a burst leave in one `writev` (and, over TLS, in fewer
/// records).
///
/// A sender that awaits each `send` writes one frame every few turns of the event loop: its next
/// frame is a job queued behind the flush of the previous one. So while flushes come densely (less
/// than ``burstGap`` apart) a flush waits as long as writes keep arriving, and goes out after
/// ``maxIdleTurns`` turns of the loop with no new write; a sparse write (a request, a reply, the
/// first frame of a burst) is flushed at once, so round trips pay nothing. At
/// ``maxPendingBytes`` or ``maxPendingWrites`` a flush goes out at once. Writes themselves are
/// never held: they reach the channel at once and count toward its writability, so a full socket
/// still suspends senders.
final class FlushCoalescingHandler: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = IOData
    typealias OutboundOut = IOData

    let maxPendingBytes: Int
    let maxPendingWrites: Int
    let maxIdleTurns: Int
    let burstGap: TimeAmount
    private var lastFlush = NIODeadline.uptimeNanoseconds(0)
    private var dense = false
    private var pendingBytes = 0
    private var pendingWrites = 0
    private var writeCount = 0
    private var flushRequested = false
    private var turnScheduled = false
    private var removed = false

    init(maxPendingBytes: Int = 64 << 10, maxPendingWrites: Int = 128, maxIdleTurns: Int = 16, burstGap: TimeAmount = .microseconds(50)) {
        self.maxPendingBytes = maxPendingBytes
        self.maxPendingWrites = maxPendingWrites
        self.maxIdleTurns = maxIdleTurns
        self.burstGap = burstGap
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        pendingBytes &+= unwrapOutboundIn(data).readableBytes
        pendingWrites &+= 1
        writeCount &+= 1
        context.write(data, promise: promise)
    }

    func flush(context: ChannelHandlerContext) {
        // Density is measured between flushes, not writes: one frame is several writes (header,
        // payload) a microsecond apart, and a lone frame (a ping, a reply) must not wait out the
        // idle turns for a burst that is not coming.
        let now = NIODeadline.now()
        dense = now - lastFlush < burstGap
        lastFlush = now
        flushRequested = true
        if !dense || pendingBytes >= maxPendingBytes || pendingWrites >= maxPendingWrites {
            flushNow(context)
        } else if !turnScheduled {
            scheduleTurn(context, writesSeen: writeCount, idleTurns: 0)
        }
    }

    private func scheduleTurn(_ context: ChannelHandlerContext, writesSeen: Int, idleTurns: Int) {
        turnScheduled = true
        let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        context.eventLoop.execute {
            let (handler, context) = loopBound.value
            handler.turnScheduled = false
            guard handler.flushRequested, !handler.removed else { return }
            let idle = handler.writeCount == writesSeen ? idleTurns + 1 : 0
            if idle >= handler.maxIdleTurns {
                handler.flushNow(context)
            } else {
                handler.scheduleTurn(context, writesSeen: handler.writeCount, idleTurns: idle)
            }
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        removed = true
    }

    /// A close sends what was written first: a held flush goes out before the channel closes (the
    /// writes' senders were told they were written).
    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if flushRequested { flushNow(context) }
        context.close(mode: mode, promise: promise)
    }

    private func flushNow(_ context: ChannelHandlerContext) {
        flushRequested = false
        pendingBytes = 0
        pendingWrites = 0
        context.flush()
    }
}

/// Ends a TLS connection at once when the peer's TCP input is closed: after a FIN, no close_notify
/// can ever come, so waiting for one (swift-nio-ssl's 5 s shutdown timeout) only delays the end.
///
/// A TLS-terminating proxy (nginx) answers our close_notify by closing the TCP connection without
/// its own close_notify; with `allowRemoteHalfClosure`, the TLS handler took that as an unclean
/// close and waited out its shutdown timeout, so a closing wss:// connection behind nginx took 5 s.
/// The socket-side handler sits below the TLS handler and closes the socket itself once both have
/// happened: the input closed and a close was asked for (in either order).
final class TLSCloseShortcut {
    private var inputClosed = false
    private var closeRequested = false
    private var socketContext: ChannelHandlerContext?

    private func closeSocketIfDone() {
        guard inputClosed, closeRequested, let context = socketContext else { return }
        socketContext = nil
        context.close(promise: nil)
    }

    /// Below the TLS handler: sees the TCP FIN, and closes the socket without the TLS handler.
    final class SocketSide: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = NIOAny
        let shortcut: TLSCloseShortcut
        init(_ shortcut: TLSCloseShortcut) { self.shortcut = shortcut }

        func handlerAdded(context: ChannelHandlerContext) { shortcut.socketContext = context }
        func handlerRemoved(context: ChannelHandlerContext) { shortcut.socketContext = nil }

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if case .some(.inputClosed) = event as? ChannelEvent { shortcut.inputClosed = true }
            context.fireUserInboundEventTriggered(event)
            shortcut.closeSocketIfDone()
        }
    }

    /// Above the TLS handler: sees the application's close (which the TLS handler turns into
    /// close_notify and a wait for the peer's).
    final class ApplicationSide: ChannelOutboundHandler, RemovableChannelHandler {
        typealias OutboundIn = NIOAny
        let shortcut: TLSCloseShortcut
        init(_ shortcut: TLSCloseShortcut) { self.shortcut = shortcut }

        func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
            if mode == .all { shortcut.closeRequested = true }
            context.close(mode: mode, promise: promise)
            shortcut.closeSocketIfDone()
        }
    }
}
