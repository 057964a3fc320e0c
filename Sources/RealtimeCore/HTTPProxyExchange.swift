import AsyncHTTPClient
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// Requests through an HTTP proxy, on a connection of their own per request (as an event stream
/// has), for what async-http-client cannot do: it tunnels every request with `CONNECT`, which
/// proxies with stock rules refuse for any port but 443 (curl sends plain `http://` in
/// absolute-form instead), and it reports a refused `CONNECT` without the proxy's status.
///
/// - `http://`: the request goes to the proxy in absolute-form (`GET http://host:port/path HTTP/1.1`,
///   `Proxy-Authorization: Basic` with credentials); a 407 is the proxy's refusal
///   (``RealtimeError/Code/proxyFailed`` with the status), any other status the server's.
/// - `https://`: a `CONNECT` tunnel (``ProxyTunnel``), TLS with the request's ``TLSOptions`` inside
///   it; a refused tunnel is ``RealtimeError/Code/proxyFailed`` with the proxy's status.
///
/// Redirects are followed as the runtime's HTTP clients follow them (up to 10, no cycles; a 303,
/// or a 301 or 302 to a POST, becomes a GET without body; credentials and cookies do not follow
/// to another origin), each hop by the runtime's proxy rules for its URL. Cookies are sent and
/// recorded per hop.
enum HTTPProxyExchange {
    /// The proxy `request` goes through on a connection of ours; nil when async-http-client
    /// carries it (no proxy, SOCKS5, or an app's own client).
    static func proxy(for request: HTTPRequestSpec, runtime: RealtimeRuntime) throws -> ProxyServer? {
        let endpoint = try Endpoint(request.url, allowedSchemes: ["http", "https"])
        let pinned = endpoint.isSecure && !request.tls.pinnedPublicKeySHA256.isEmpty
        if runtime.httpClient != nil, !pinned { return nil }
        guard let proxy = try runtime.proxy.server(for: endpoint), proxy.kind == .http else { return nil }
        return proxy
    }

    /// What a response's reader gets after its head: body chunks, then the end.
    typealias Body = AsyncThrowingStream<ByteBuffer, any Error>

    /// Sends `request` (following redirects) and returns the final head and its body.
    ///
    /// `deadline` limits the whole exchange (connects, tunnels, heads and, with `coversBody`, the
    /// body); past it the exchange fails with `timeoutError`. Cancelling the calling task, or
    /// dropping the body, closes the connection.
    static func send(
        _ request: HTTPRequestSpec, runtime: RealtimeRuntime, deadline: NIODeadline, coversBody: Bool,
        timeoutError: @escaping @Sendable () -> RealtimeError
    ) async throws -> (HTTPResponseHead, Body) {
        var url = request.url
        var endpoint = try Endpoint(url, allowedSchemes: ["http", "https"])
        var method = request.method
        var body = request.body
        var headers = request.headers
        runtime.injectTraceContext(request.traceContext, into: &headers)
        var visited: Set<String> = []
        while true {
            try Task.checkCancellation()
            let proxy = try runtime.proxy.server(for: endpoint)
            var hopHeaders = headers
            request.cookies?.apply(to: &hopHeaders, url: url)
            if endpoint.isSecure { _ = try request.tls.sslContext() }
            let (responseBody, continuation) = Body.makeStream()
            let hop = try Hop(
                method: method, endpoint: endpoint, headers: hopHeaders, body: body, tls: request.tls, proxy: proxy, url: url,
                runtime: runtime, deadline: deadline, coversBody: coversBody, timeoutError: timeoutError, body: continuation)
            let (status, responseHeaders) = try await hop.head()
            request.cookies?.record(responseHeaders, from: url)
            if let proxy, proxy.kind == .http, !endpoint.isSecure,
                let refusal = ProxyTunnel.forwardRefusal(status: status, proxy: proxy, url: url)
            {
                hop.close()
                throw refusal
            }
            guard [301, 302, 303, 307, 308].contains(status.code), let location = responseHeaders.first(name: "location") else {
                return (HTTPResponseHead(status: status, headers: responseHeaders, url: url), responseBody)
            }
            hop.close()
            guard visited.count < 10 else {
                throw RealtimeError(.connectFailed, "\(Redaction.url(request.url)) redirected more than 10 times", status: status)
            }
            guard let resolved = URL(string: location, relativeTo: URL(string: url))?.absoluteURL.absoluteString,
                let next = try? Endpoint(resolved, allowedSchemes: ["http", "https"])
            else {
                throw RealtimeError(.invalidURL, "\(Redaction.url(url)) redirected to an unusable URL", status: status)
            }
            visited.insert(url)
            guard !visited.contains(resolved) else {
                throw RealtimeError(.connectFailed, "\(Redaction.url(url)) redirected in a cycle", status: status)
            }
            if (status.code == 303 && method != .HEAD) || ([301, 302].contains(status.code) && method == .POST) {
                method = .GET
                body = nil
                headers.remove(name: "content-length")
                headers.remove(name: "content-type")
            }
            if next.scheme != endpoint.scheme || next.host != endpoint.host || next.port != endpoint.port {
                for name in ["origin", "cookie", "authorization", "proxy-authorization"] { headers.remove(name: name) }
            }
            url = resolved
            endpoint = next
        }
    }

    /// What a failure of one exchange is called: the proxy's (a connect to it, a refused tunnel),
    /// or the connection's by its stage.
    static func mapError(_ error: any Error, url: String, proxy: ProxyServer?, established: Bool) -> any Error {
        if let error = error as? RealtimeError { return established && error.code == .connectionClosed ? error.at(.established) : error }
        if error is CancellationError { return error }
        if !established, let proxy, let failure = ProxyTunnel.mapError(error, proxy: proxy, url: url) { return failure }
        return SocketConnection.mapError(error, url: url, established: established)
    }
}

/// One request and its response on a connection of its own.
private final class Hop: Sendable {
    typealias Head = (status: HTTPResponseStatus, headers: HTTPHeaders)

    private struct State {
        var channel: (any Channel)?
        var closed = false
        var timer: Scheduled<Void>?
    }

    private let state = NIOLockedValueBox(State())
    private let headReceived = OneShot<Head>()
    private let continuation: HTTPProxyExchange.Body.Continuation
    private let coversBody: Bool

    init(
        method: HTTPMethod, endpoint: Endpoint, headers: HTTPHeaders, body: ByteBuffer?, tls: TLSOptions, proxy: ProxyServer?, url: String,
        runtime: RealtimeRuntime, deadline: NIODeadline, coversBody: Bool, timeoutError: @escaping @Sendable () -> RealtimeError,
        body continuation: HTTPProxyExchange.Body.Continuation
    ) throws {
        self.coversBody = coversBody
        self.continuation = continuation
        let absolute = proxy?.kind == .http && !endpoint.isSecure
        let request = try HTTPStreamRequest(
            method: method, target: endpoint, headers: headers, body: body,
            form: absolute ? .absolute(proxyAuthorization: proxy?.basicAuthorization) : .origin
        ).encoded()
        let sslContext = endpoint.isSecure ? try tls.sslContext() : nil
        let tunnel = absolute ? nil : proxy
        let eventLoop = runtime.eventLoopGroup.next()
        let (continuation, headReceived) = (continuation, self.headReceived)
        // The body's end, or its reader dropping it, closes the connection (and ends this cycle).
        continuation.onTermination = { _ in self.close() }
        let fail: @Sendable (any Error, Bool) -> Void = { error, established in
            let failure = HTTPProxyExchange.mapError(error, url: url, proxy: proxy, established: established)
            headReceived.complete(.failure(failure))
            continuation.finish(throwing: failure)
        }
        let timer = eventLoop.scheduleTask(deadline: deadline) {
            fail(timeoutError(), true)
            self.close()
        }
        state.withLockedValue { $0.timer = timer }
        let install: @Sendable (any Channel) throws -> Void = { channel in
            let pipeline = channel.pipeline.syncOperations
            if let sslContext {
                try SocketConnection.addTLS(
                    to: pipeline, context: sslContext, serverName: tls.serverName ?? endpoint.host, pins: tls.pinnedPublicKeySHA256)
            }
            try pipeline.addHandler(
                HopHandler(
                    request: request, isHeadRequest: method == .HEAD, onHead: { headReceived.complete(.success(($0, $1))) },
                    continuation: continuation, fail: fail))
        }
        let bootstrap = SocketConnection.bootstrap(on: eventLoop, connectTimeout: runtime.http.connectTimeout, allowRemoteHalfClosure: false)
            .channelInitializer { [weak self] channel in
                channel.eventLoop.makeCompletedFuture {
                    guard let self, self.attach(channel) else { throw CancellationError() }
                    if tunnel == nil { try install(channel) }
                }
            }
        let (host, port) = proxy.map { ($0.host, $0.port) } ?? (endpoint.host, endpoint.port)
        // The tunnel's handlers go on once the connect succeeded: a failed connect is reported
        // once, as a connect failure, never as an abandoned tunnel.
        SocketConnection.connect(bootstrap, host: host, port: port).whenComplete { result in
            switch result {
            case .failure(let error):
                fail(error, false)
            case .success(let channel):
                guard let tunnel else { return }
                ProxyTunnel.open(
                    through: tunnel, to: endpoint.host, port: endpoint.port, url: url, on: channel, then: install,
                    failed: { fail($0, false) })
            }
        }
    }

    /// Keeps the connection's channel; false when the exchange was closed meanwhile.
    private func attach(_ channel: any Channel) -> Bool {
        state.withLockedValue { state in
            guard !state.closed else { return false }
            state.channel = channel
            return true
        }
    }

    /// Closes the connection and ends the body (idempotent).
    func close() {
        let (channel, timer) = state.withLockedValue { state -> ((any Channel)?, Scheduled<Void>?) in
            guard !state.closed else { return (nil, nil) }
            state.closed = true
            defer {
                state.channel = nil
                state.timer = nil
            }
            return (state.channel, state.timer)
        }
        timer?.cancel()
        channel?.close(promise: nil)
        headReceived.complete(.failure(CancellationError()))
        continuation.finish()
    }

    /// Waits for the response head; throws what failed before it (`CancellationError` when the
    /// task is cancelled, which closes the connection).
    func head() async throws -> Head {
        let head: Head
        do {
            head = try await headReceived.cancellableValue()
        } catch {
            close()
            throw error
        }
        if !coversBody {
            let timer = state.withLockedValue { state in
                defer { state.timer = nil }
                return state.timer
            }
            timer?.cancel()
        }
        return head
    }
}

/// Writes one request and reads its response (`HTTPStreamResponseParser`) into a hop's events.
private final class HopHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var request: ByteBuffer?
    private var parser: HTTPStreamResponseParser
    private let onHead: (HTTPResponseStatus, HTTPHeaders) -> Void
    private let continuation: HTTPProxyExchange.Body.Continuation
    private let fail: @Sendable (any Error, Bool) -> Void
    private var ended = false

    init(
        request: ByteBuffer, isHeadRequest: Bool, onHead: @escaping (HTTPResponseStatus, HTTPHeaders) -> Void,
        continuation: HTTPProxyExchange.Body.Continuation, fail: @escaping @Sendable (any Error, Bool) -> Void
    ) {
        self.request = request
        parser = HTTPStreamResponseParser(isHeadRequest: isHeadRequest)
        self.onHead = onHead
        self.continuation = continuation
        self.fail = fail
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { sendRequest(context: context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        sendRequest(context: context)
        context.fireChannelActive()
    }

    private func sendRequest(context: ChannelHandlerContext) {
        guard let request else { return }
        self.request = nil
        context.writeAndFlush(wrapOutboundOut(request), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !ended else { return }
        let (continuation, onHead) = (continuation, onHead)
        do {
            let complete = try parser.parse(
                unwrapInboundIn(data), onHead: { onHead($0, $1) }, onBody: { continuation.yield($0) })
            if complete { end(context: context, error: nil) }
        } catch {
            end(context: context, error: error)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !ended {
            do {
                try parser.inputClosed()
                end(context: context, error: nil)
            } catch {
                end(context: context, error: error)
            }
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        end(context: context, error: error)
    }

    private func end(context: ChannelHandlerContext, error: (any Error)?) {
        guard !ended else { return }
        ended = true
        if let error {
            fail(error, parser.hasHead)
        } else {
            continuation.finish()
        }
        context.close(promise: nil)
    }
}
