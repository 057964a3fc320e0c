import AsyncHTTPClient
public import NIOCore
import NIOConcurrencyHelpers
import NIOHTTP1
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif

/// The HTTP mechanics under SSE, long polling and POST sends, on async-http-client; requests
/// through an HTTP proxy go on connections of their own (absolute-form for `http://`, a `CONNECT`
/// tunnel for `https://`), as curl sends them. It knows nothing of any protocol: status codes and
/// bodies mean what the caller decides.
public enum HTTPTransport {
    /// Sends `request` and runs `body` with the response head and its body chunks as they arrive.
    ///
    /// When `request.idleTimeout` is set, a body that stays silent that long fails with
    /// ``RealtimeError/Code/timeout``. The connection is released when `body` returns.
    public static func stream<Result: Sendable>(
        _ request: HTTPRequestSpec,
        runtime: RealtimeRuntime = .shared,
        _ body: @escaping @Sendable (HTTPResponseHead, HTTPBodyChunks) async throws -> Result
    ) async throws -> Result {
        if try HTTPProxyExchange.proxy(for: request, runtime: runtime) != nil {
            let (head, chunks) = try await HTTPProxyExchange.send(
                request, runtime: runtime, deadline: .now() + TimeAmount(request.headTimeout), coversBody: false,
                timeoutError: { RealtimeError(.timeout, "request to \(Redaction.url(request.url)) timed out") })
            return try await stream(head: head, body: .stream(chunks), request: request, runtime: runtime, body)
        }
        let (client, clientRequest, proxy) = try request.prepare(runtime: runtime)
        let response: HTTPClientResponse
        do {
            response = try await client.execute(clientRequest, timeout: TimeAmount(request.headTimeout), logger: runtime.libraryLogger)
        } catch {
            throw mapError(error, url: request.url, proxy: proxy)
        }
        request.cookies?.record(response.headers, from: response.url?.absoluteString ?? request.url)
        let head = HTTPResponseHead(status: response.status, headers: response.headers, url: response.url?.absoluteString ?? request.url)
        return try await stream(head: head, body: response.body, request: request, runtime: runtime, body)
    }

    /// Runs `body` with a response's head and body, watching the body's idle timeout.
    private static func stream<Result: Sendable>(
        head: HTTPResponseHead, body responseBody: HTTPClientResponse.Body, request: HTTPRequestSpec, runtime: RealtimeRuntime,
        _ body: @escaping @Sendable (HTTPResponseHead, HTTPBodyChunks) async throws -> Result
    ) async throws -> Result {
        guard let idleTimeout = request.idleTimeout else {
            return try await body(head, HTTPBodyChunks(base: responseBody, progress: nil))
        }
        let timeline = ClockTimeline(clock: runtime.clock)
        let progress = BodyProgress(now: timeline.now, timeline: timeline)
        return try await withThrowingTaskGroup(of: Result?.self) { group in
            group.addTask {
                try await body(head, HTTPBodyChunks(base: responseBody, progress: progress))
            }
            group.addTask {
                // Fires at the last byte + idleTimeout (within the clock's scheduling delay), never
                // while the reader has paused reading (see HTTPBodyChunks.pausingIdleTimeout).
                while true {
                    let (last, paused) = progress.snapshot
                    let deadline = last + idleTimeout
                    if !paused, timeline.now >= deadline {
                        throw RealtimeError.timeout("no bytes from \(Redaction.url(request.url)) for \(idleTimeout)")
                    }
                    try await timeline.sleep(until: paused ? timeline.now + idleTimeout : deadline)
                }
            }
            defer { group.cancelAll() }
            while let next = try await group.next() {
                if let next { return next }
            }
            throw CancellationError()
        }
    }

    /// Sends `request` and reads the whole body, up to `request.maxBodySize`, all within
    /// `headTimeout + idleTimeout` (real time): a server that sends the head and then stalls the
    /// body fails with ``RealtimeError/Code/timeout`` instead of holding the caller.
    ///
    /// The body is collected on the connection's event loop (async-http-client's delegate API): no
    /// task besides the caller's, and cancelling the caller cancels the request.
    public static func execute(_ request: HTTPRequestSpec, runtime: RealtimeRuntime = .shared) async throws -> (HTTPResponseHead, ByteBuffer) {
        let total = request.headTimeout + (request.idleTimeout ?? .zero)
        if try HTTPProxyExchange.proxy(for: request, runtime: runtime) != nil {
            return try await executeThroughProxy(request, runtime: runtime, total: total)
        }
        let (client, clientRequest, proxy) = try request.prepareForDelegate(runtime: runtime)
        let collector = BodyCollector(limit: request.maxBodySize, cookies: request.cookies, url: request.url)
        let task = client.execute(
            request: clientRequest, delegate: collector, deadline: .now() + TimeAmount(total), logger: runtime.libraryLogger)
        do {
            let result = try await withTaskCancellationHandler {
                try await task.futureResult.get()
            } onCancel: {
                task.cancel()
            }
            // Held until the request ended: the runtime's own HTTP clients shut down with its last copy.
            withExtendedLifetime(runtime) {}
            return result
        } catch {
            if Task.isCancelled { throw CancellationError() }
            if let error = error as? HTTPClientError, error == .deadlineExceeded {
                throw RealtimeError.timeout("the response from \(Redaction.url(request.url)) did not complete within \(total)")
            }
            if error is NIOTooManyBytesError {
                throw RealtimeError(
                    .messageTooLarge, "the response body from \(Redaction.url(request.url)) exceeds \(request.maxBodySize) bytes", underlying: error)
            }
            throw mapError(error, url: request.url, proxy: proxy)
        }
    }

    /// ``execute(_:runtime:)`` through an HTTP proxy, on a connection of its own (``HTTPProxyExchange``).
    private static func executeThroughProxy(
        _ request: HTTPRequestSpec, runtime: RealtimeRuntime, total: Duration
    ) async throws -> (HTTPResponseHead, ByteBuffer) {
        do {
            let (head, chunks) = try await HTTPProxyExchange.send(
                request, runtime: runtime, deadline: .now() + TimeAmount(total), coversBody: true,
                timeoutError: { RealtimeError.timeout("the response from \(Redaction.url(request.url)) did not complete within \(total)") })
            var collected = ByteBuffer()
            for try await chunk in chunks {
                collected.writeImmutableBuffer(chunk)
                if collected.readableBytes > request.maxBodySize {
                    throw RealtimeError(
                        .messageTooLarge, "the response body from \(Redaction.url(request.url)) exceeds \(request.maxBodySize) bytes")
                }
            }
            // A cancelled task ends the body's iteration early: that is no complete body.
            try Task.checkCancellation()
            return (head, collected)
        } catch {
            if Task.isCancelled { throw CancellationError() }
            throw error
        }
    }

    /// Collects a whole response on its event loop, refusing a body over the limit.
    private final class BodyCollector: HTTPClientResponseDelegate {
        typealias Response = (HTTPResponseHead, ByteBuffer)
        private struct State {
            var head: HTTPResponseHead?
            var body: ByteBuffer?
            var finalURL: String?
        }
        private let state = NIOLockedValueBox(State())
        let limit: Int
        let cookies: CookieStore?
        let url: String

        init(limit: Int, cookies: CookieStore?, url: String) {
            self.limit = limit
            self.cookies = cookies
            self.url = url
        }

        func didVisitURL(task: HTTPClient.Task<Response>, _ request: HTTPClient.Request, _ head: NIOHTTP1.HTTPResponseHead) {
            let visited = request.url.absoluteString
            cookies?.record(head.headers, from: visited)
            state.withLockedValue { $0.finalURL = visited }
        }

        func didReceiveHead(task: HTTPClient.Task<Response>, _ head: NIOHTTP1.HTTPResponseHead) -> EventLoopFuture<Void> {
            state.withLockedValue { state in
                state.head = HTTPResponseHead(status: head.status, headers: head.headers, url: state.finalURL ?? url)
            }
            return task.eventLoop.makeSucceededVoidFuture()
        }

        func didReceiveBodyPart(task: HTTPClient.Task<Response>, _ part: ByteBuffer) -> EventLoopFuture<Void> {
            let tooLarge = state.withLockedValue { state -> Bool in
                if state.body == nil {
                    state.body = part
                } else {
                    state.body!.writeImmutableBuffer(part)
                }
                return state.body!.readableBytes > limit
            }
            if tooLarge { task.fail(reason: NIOTooManyBytesError(maxBytes: limit)) }
            return task.eventLoop.makeSucceededVoidFuture()
        }

        func didFinishRequest(task: HTTPClient.Task<Response>) throws -> Response {
            try state.withLockedValue { state in
                guard let head = state.head else { throw HTTPClientError.remoteConnectionClosed }
                return (head, state.body ?? ByteBuffer())
            }
        }
    }

    static func mapError(_ error: any Error, url: String, proxy: ProxyServer? = nil) -> any Error {
        if let proxy, let failure = ProxyTunnel.mapError(error, proxy: proxy, url: url) { return failure }
        // A request goes out on a connection that is open: one that ends under it was lost (a
        // connect that fails is NIO's connection error, not a reset).
        if let ended = SocketConnection.connectionEnd(error, url: url, established: true) { return ended }
        switch error {
        case let error as RealtimeError: return error
        case is CancellationError: return error
        case let error where TLSErrorDetection.isTLSFailure(error):
            return RealtimeError(.tlsFailure, "TLS handshake with \(Redaction.url(url)) failed", stage: .tls, underlying: error)
        case let error as HTTPClientError:
            if error == .getConnectionFromPoolTimeout {
                return RealtimeError(
                    .timeout, "no connection to \(Redaction.url(url)) within the connect timeout (the pool for this host is full; see HTTPConnectionOptions.maxConnectionsPerHost)",
                    underlying: error)
            }
            if error == .deadlineExceeded || error == .readTimeout || error == .connectTimeout {
                return RealtimeError(.timeout, "request to \(Redaction.url(url)) timed out", underlying: error)
            }
            if error == .cancelled { return CancellationError() }
            if error == .remoteConnectionClosed {
                return RealtimeError(.connectionClosed, "the server closed the connection", underlying: error)
            }
            return RealtimeError(.connectFailed, "request to \(Redaction.url(url)) failed", underlying: error)
        default:
            return RealtimeError(.connectFailed, "request to \(Redaction.url(url)) failed", underlying: error)
        }
    }
}

/// When the last body bytes arrived, and whether the reader has paused reading.
final class BodyProgress: Sendable {
    private let state: NIOLockedValueBox<(last: Duration, paused: Int)>
    private let timeline: ClockTimeline

    init(now: Duration, timeline: ClockTimeline) {
        state = NIOLockedValueBox((now, 0))
        self.timeline = timeline
    }

    var snapshot: (last: Duration, paused: Bool) { state.withLockedValue { ($0.last, $0.paused > 0) } }

    func touch() {
        let now = timeline.now
        state.withLockedValue { $0.last = now }
    }

    func pause() { state.withLockedValue { $0.paused += 1 } }

    func resume() {
        let now = timeline.now
        state.withLockedValue {
            $0.paused -= 1
            $0.last = now
        }
    }
}

/// Body chunks of a streamed response, exactly as they arrive.
public struct HTTPBodyChunks: AsyncSequence, Sendable {
    /// The type of the sequence's elements.
    public typealias Element = ByteBuffer
    let base: HTTPClientResponse.Body
    let progress: BodyProgress?

    /// The sequence's iterator.
    public struct AsyncIterator: AsyncIteratorProtocol {
        var base: HTTPClientResponse.Body.AsyncIterator
        let progress: BodyProgress?

        /// The next element, or `nil` once the sequence has ended.
        public mutating func next() async throws -> ByteBuffer? {
            let chunk: ByteBuffer?
            do {
                chunk = try await base.next()
            } catch let error as HTTPClientError where error == .remoteConnectionClosed {
                throw RealtimeError(.connectionClosed, "the server closed the connection mid-body", underlying: error)
            }
            if chunk != nil { progress?.touch() }
            return chunk
        }
    }

    /// Makes an iterator over the sequence.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator(), progress: progress)
    }

    /// Runs `body` (which does not read the body: a consumer is behind) without the idle timeout
    /// counting that time; the idle time starts again when it returns.
    public func pausingIdleTimeout<T>(_ body: () async throws -> T) async rethrows -> T {
        progress?.pause()
        defer { progress?.resume() }
        return try await body()
    }
}

extension TimeAmount {
    init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
