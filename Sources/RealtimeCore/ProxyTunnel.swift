import AsyncHTTPClient
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSOCKS

/// A tunnel through a proxy for a connection of ours (a WebSocket, an event stream or a request
/// to an `https://` server): the handlers that open it on a
/// channel connected to the proxy, and what a proxy's failure is called.
///
/// The handlers are the first in the pipeline and the only ones while the tunnel opens; once it is
/// open they remove themselves and the connection's own pipeline (TLS, the upgrade) is built on
/// the open channel, so TLS to the server runs inside the tunnel.
enum ProxyTunnel {
    /// Adds the handlers that ask `proxy` for a tunnel to `host:port`, on a channel that is not yet
    /// connected (they start when it is). The future succeeds once the tunnel is open and they are
    /// gone; it fails with ``RealtimeError/Code/proxyFailed`` (the channel is then closed).
    static func install(
        through proxy: ProxyServer, to host: String, port: Int, url: String, on channel: any Channel
    ) throws -> EventLoopFuture<Void> {
        let pipeline = channel.pipeline.syncOperations
        switch proxy.kind {
        case .http:
            let encoder = HTTPRequestEncoder()
            let decoder = ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .dropBytes))
            let handler = HTTPConnectHandler(proxy: proxy, host: host, port: port, url: url, promise: channel.eventLoop.makePromise())
            try pipeline.addHandler(encoder)
            try pipeline.addHandler(decoder)
            try pipeline.addHandler(handler)
            // Every step runs on the channel's event loop (the handlers are not Sendable).
            return handler.promise.futureResult.assumeIsolated().flatMap { () -> EventLoopFuture<Void> in
                let sync = channel.pipeline.syncOperations
                return sync.removeHandler(handler).assumeIsolated().flatMap {
                    sync.removeHandler(decoder)
                }.flatMap {
                    sync.removeHandler(encoder)
                }.nonisolated()
            }.nonisolated()
        case .socks5:
            let address: SOCKSAddress
            if let literal = try? SocketAddress(ipAddress: host, port: port) {
                address = .address(literal)
            } else {
                address = .domain(host, port: port)
            }
            let socks = SOCKSClientHandler(targetAddress: address)
            let watcher = SOCKSWatcher(proxy: proxy, url: url, promise: channel.eventLoop.makePromise())
            try pipeline.addHandler(socks)
            try pipeline.addHandler(watcher)
            return watcher.promise.futureResult.assumeIsolated().flatMap { () -> EventLoopFuture<Void> in
                let sync = channel.pipeline.syncOperations
                return sync.removeHandler(watcher).assumeIsolated().flatMap { sync.removeHandler(socks) }.nonisolated()
            }.nonisolated()
        }
    }

    /// What a failure of a request through `proxy` is called when the proxy caused it (nil: the
    /// error is the server's, or the connection's after the tunnel was open).
    static func mapError(_ error: any Error, proxy: ProxyServer, url: String) -> RealtimeError? {
        let target = Redaction.url(url)
        if let error = error as? HTTPClientError {
            if error == .proxyAuthenticationRequired {
                return RealtimeError(
                    .proxyFailed, "the proxy \(proxy) refused the tunnel to \(target): \(authenticationRefusal(proxy))",
                    status: .proxyAuthenticationRequired, underlying: error)
            }
            if error == .invalidProxyResponse {
                return RealtimeError(.proxyFailed, "the proxy \(proxy) refused the tunnel to \(target)", underlying: error)
            }
            if error == .httpProxyHandshakeTimeout || error == .socksHandshakeTimeout {
                return RealtimeError(.timeout, "the proxy \(proxy) did not open the tunnel to \(target) in time", underlying: error)
            }
            if error == .connectTimeout {
                return RealtimeError(.timeout, "could not connect to the proxy \(proxy) (for \(target)) in time", underlying: error)
            }
        }
        if error is SOCKSError.ConnectionFailed || error is SOCKSError.InvalidAuthenticationSelection
            || error is SOCKSError.NoValidAuthenticationMethod || error is SOCKSError.InvalidProtocolVersion
            || error is SOCKSError.InvalidReservedByte || error is SOCKSError.InvalidAddressType
            || error is SOCKSError.InvalidServerState || error is SOCKSError.UnexpectedRead
        {
            return RealtimeError(.proxyFailed, "the SOCKS5 proxy \(proxy) refused the tunnel to \(target)", underlying: error)
        }
        if isConnectFailure(error) {
            return RealtimeError(.connectFailed, "could not connect to the proxy \(proxy) (for \(target))", underlying: error)
        }
        return nil
    }

    /// What an HTTP proxy's answer to a request it was asked to forward (absolute-form: plain
    /// `http://` through an HTTP proxy) means: a 407 is the proxy's own refusal, ``RealtimeError/Code/proxyFailed``
    /// with the status; nil for any other status, which is the server's answer passed on.
    static func forwardRefusal(status: HTTPResponseStatus, proxy: ProxyServer, url: String) -> RealtimeError? {
        guard status == .proxyAuthenticationRequired else { return nil }
        return RealtimeError(
            .proxyFailed, "the proxy \(proxy) refused the request to \(Redaction.url(url)): \(authenticationRefusal(proxy))", status: status)
    }

    /// Why a proxy answered 407: no credentials were sent, or the ones sent were refused.
    static func authenticationRefusal(_ proxy: ProxyServer) -> String {
        proxy.username == nil ? "proxy authentication required" : "the proxy did not accept the credentials"
    }

    /// Whether the TCP connection itself could not be made (to a proxy, that is the proxy's address).
    static func isConnectFailure(_ error: any Error) -> Bool {
        if error is NIOConnectionError { return true }
        if let error = error as? ChannelError, case .connectTimeout = error { return true }
        if let error = error as? IOError {
            return [ECONNREFUSED, ENETUNREACH, EHOSTUNREACH, ETIMEDOUT].contains(error.errnoCode)
        }
        return false
    }
}

/// Asks an HTTP proxy for a `CONNECT` tunnel and waits for its answer (RFC 9110 section 9.3.6:
/// any 2xx opens the tunnel right after the header section; anything else keeps the connection
/// in HTTP and refuses).
private final class HTTPConnectHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    private enum State { case idle, sent, accepted, done }
    private var state = State.idle
    let proxy: ProxyServer
    let authority: String
    let url: String
    let promise: EventLoopPromise<Void>

    init(proxy: ProxyServer, host: String, port: Int, url: String, promise: EventLoopPromise<Void>) {
        self.proxy = proxy
        authority = (host.contains(":") ? "[\(host)]" : host) + ":\(port)"
        self.url = url
        self.promise = promise
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { sendConnect(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        sendConnect(context: context)
        context.fireChannelActive()
    }

    private func sendConnect(context: ChannelHandlerContext) {
        guard state == .idle else { return }
        state = .sent
        var head = HTTPRequestHead(version: .http1_1, method: .CONNECT, uri: authority)
        head.headers.add(name: "Host", value: authority)
        if let authorization = proxy.basicAuthorization { head.headers.add(name: "Proxy-Authorization", value: authorization) }
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            guard state == .sent else { return }
            if (200..<300).contains(head.status.code) {
                state = .accepted
                return
            }
            let why = head.status == .proxyAuthenticationRequired
                ? ProxyTunnel.authenticationRefusal(proxy) : "it answered \(head.status.code) \(head.status.reasonPhrase)"
            fail(
                RealtimeError(.proxyFailed, "the proxy \(proxy) refused the tunnel to \(Redaction.url(url)): \(why)", status: head.status),
                context: context)
        case .body:
            break
        case .end:
            guard state == .accepted else { return }
            state = .done
            promise.succeed()
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(RealtimeError(.proxyFailed, "the proxy \(proxy) closed the connection before opening the tunnel to \(Redaction.url(url))"), context: context)
        context.fireChannelInactive()
    }

    /// The proxy's FIN (connections allow half-closure): it will not answer any more.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .some(.inputClosed) = event as? ChannelEvent {
            fail(RealtimeError(.proxyFailed, "the proxy \(proxy) closed the connection before opening the tunnel to \(Redaction.url(url))"), context: context)
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        fail(
            RealtimeError(.proxyFailed, "the proxy \(proxy) broke the HTTP protocol while opening the tunnel to \(Redaction.url(url))", underlying: error),
            context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        if state != .done {
            state = .done
            promise.fail(RealtimeError(.proxyFailed, "the tunnel through the proxy \(proxy) was abandoned"))
        }
    }

    private func fail(_ error: RealtimeError, context: ChannelHandlerContext) {
        guard state != .done else { return }
        state = .done
        promise.fail(error)
        context.close(promise: nil)
    }
}

/// Waits for swift-nio's SOCKS client handler to open the tunnel, and names its failures.
private final class SOCKSWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    private var done = false
    let proxy: ProxyServer
    let url: String
    let promise: EventLoopPromise<Void>

    init(proxy: ProxyServer, url: String, promise: EventLoopPromise<Void>) {
        self.proxy = proxy
        self.url = url
        self.promise = promise
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .some(.inputClosed) = event as? ChannelEvent {
            fail(RealtimeError(.proxyFailed, "the SOCKS5 proxy \(proxy) closed the connection before opening the tunnel to \(Redaction.url(url))"), context: context)
            return context.fireUserInboundEventTriggered(event)
        }
        guard event is SOCKSProxyEstablishedEvent else { return context.fireUserInboundEventTriggered(event) }
        guard !done else { return }
        done = true
        promise.succeed()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        let failure = ProxyTunnel.mapError(error, proxy: proxy, url: url)
            ?? RealtimeError(.proxyFailed, "the SOCKS5 proxy \(proxy) failed while opening the tunnel to \(Redaction.url(url))", underlying: error)
        fail(failure, context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        fail(RealtimeError(.proxyFailed, "the SOCKS5 proxy \(proxy) closed the connection before opening the tunnel to \(Redaction.url(url))"), context: context)
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        if !done {
            done = true
            promise.fail(RealtimeError(.proxyFailed, "the tunnel through the proxy \(proxy) was abandoned"))
        }
    }

    private func fail(_ error: RealtimeError, context: ChannelHandlerContext) {
        guard !done else { return }
        done = true
        promise.fail(error)
        context.close(promise: nil)
    }
}

extension ProxyTunnel {
    /// The tunnel to `url` opened and closed at once (the proxy lost its upstream connection, or
    /// the server went away, before a byte passed): the connection ended during its set-up.
    static func closedAsItOpened(url: String) -> RealtimeError {
        RealtimeError(.connectionClosed, "the tunnel to \(Redaction.url(url)) closed as it opened", stage: .tls)
    }

    /// On a connected `channel` to `proxy`: opens the tunnel to `host:port`, then runs `addHandlers`
    /// (the TLS and request handlers) on the event loop; or, when the tunnel fails, or the proxy
    /// closes it as it opens it (handlers added to a closed channel would wait for nothing), calls
    /// `failed` once and closes the channel. The request and event-stream connections share it.
    static func open(
        through proxy: ProxyServer, to host: String, port: Int, url: String, on channel: any Channel,
        then addHandlers: @escaping @Sendable (any Channel) throws -> Void, failed: @escaping @Sendable (any Error) -> Void
    ) {
        channel.eventLoop.execute {
            let fail: @Sendable (any Error) -> Void = { error in
                failed(error)
                channel.close(promise: nil)
            }
            do {
                try install(through: proxy, to: host, port: port, url: url, on: channel).whenComplete { result in
                    do {
                        try result.get()
                        guard channel.isActive else { throw closedAsItOpened(url: url) }
                        try addHandlers(channel)
                    } catch {
                        fail(error)
                    }
                }
            } catch {
                fail(error)
            }
        }
    }
}
