#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// What an event stream does with the response head (see ``EventStream/run(_:runtime:options:onHead:onOutputs:)``).
public enum EventStreamHeadDecision: Sendable {
    /// Read the body as Server-Sent Events.
    case accept
    /// End at once without reading the body (EventSource's 204 "do not reconnect").
    case finish
    /// Refuse the response: read up to 512 bytes of its body (for at most 2 seconds: a body that
    /// neither ends nor reaches 512 bytes is cut there), then fail with the error made from that
    /// excerpt (nil when the body was empty).
    case refuse(@Sendable (_ bodyExcerpt: String?) -> any Error)
}

/// How an event stream ended without failing.
public enum EventStreamEnd: Sendable, Equatable {
    /// The server ended the body.
    case ended
    /// The head's decision was ``EventStreamHeadDecision/finish``.
    case finishedAtHead
}

/// Options of one event stream.
public struct EventStreamOptions: Sendable {
    /// The largest event (data plus the line being read) held; a larger one fails the stream with
    /// ``RealtimeError/Code/messageTooLarge``. Default 8 MiB.
    public var maxEventSize: Int
    /// Hand comment lines to the consumer too.
    public var emitsComments: Bool
    /// The last event ID the stream starts from (what the request sent as `Last-Event-ID`).
    public var lastEventId: String
    /// Fail with ``RealtimeError/Code/timeout`` when no bytes arrive for this long; time the stream
    /// spends paused for a slow consumer does not count. Nil (the default): no limit.
    public var idleTimeout: Duration?
    /// ``SSEParser/Configuration/unnamedEventType``: "message" unless the IKEventSource module asks for "".
    package var unnamedEventType = "message"

    /// Makes options; every parameter is the property of the same name.
    public init(maxEventSize: Int = 8 << 20, emitsComments: Bool = false, lastEventId: String = "", idleTimeout: Duration? = nil) {
        self.maxEventSize = maxEventSize
        self.emitsComments = emitsComments
        self.lastEventId = lastEventId
        self.idleTimeout = idleTimeout
    }
}

/// One Server-Sent Events response, parsed on the connection's event loop.
///
/// The stream has a connection of its own (`HTTPStreamHandler` on a channel set up as a
/// WebSocket's is: the runtime's proxy, TLS with pinning, a 512-byte receive buffer while quiet),
/// speaks HTTP/1.1 and follows up to 10 redirects. The head goes to `onHead` and every read's
/// events go to `onOutputs` in one array, both on the event loop and in stream order, with no task
/// in between: a consumer that reads from an `InboundBuffer` fed by `onOutputs` is woken once per
/// read, however many events the read carried. `onOutputs` answers whether to go on reading; after
/// `false`, reading waits (the server's writes wait on TCP, and the idle timeout does not count)
/// until ``resume()`` is called. The caller supplies the protocol's rules: what a status or
/// content type means, what the events mean.
public final class EventStream: Sendable {
    /// What the stream hands over, in stream order: events, `retry` values, comments.
    public typealias Output = SSEParser.Output

    /// How long a refused response's body is read for its excerpt at most (``EventStreamHeadDecision/refuse(_:)``).
    static let refusalExcerptWait: Duration = .seconds(2)

    /// The request still to be answered: kept until the final head, for redirects.
    private struct Pending {
        var method: HTTPMethod
        var headers: HTTPHeaders
        var body: ByteBuffer?
        var endpoint: Endpoint
        let tls: TLSOptions
        var redirects = 0
        var visited: Set<String> = []
    }

    private struct State {
        var pending: Pending?
        /// The current request's connection, once its channel exists.
        var channel: (any Channel)?
        /// Which request is current (a redirect makes the next); reports of an earlier one are ignored.
        var attempt = 0
        /// Whether the request has gone out (its set-up turn came).
        var sent = false
        var parser: SSEParser
        var headReceived = false
        var refusal: (@Sendable (String?) -> any Error)?
        var excerpt: ByteBuffer?
        /// The URL being asked, after redirects.
        var currentURL: String
        /// The proxy of the current request (nil: none).
        var currentProxy: ProxyServer?
        /// What the current read parsed, handed over at its end.
        var outputs: [EventStream.Output] = []
        var paused = false
        var resumeRequested = false
        var lastActivity: Duration = .zero
        var idleTimer: TimerQueue.Timer?
        var headTimer: Scheduled<Void>?
        var failure: (any Error)?
        var finishedAtHead = false
        var bytesReceived = 0
        /// The set-up slot this stream holds (given back at the head, or when the request ends).
        var slot: SetUpSlot?
        /// The slot request while it waits in line, for ``cancel()`` to withdraw it.
        var slotRequest: (host: String, id: UInt64)?
        /// How the request ended (nil: not yet).
        var result: Result<Void, any Error>?
        /// Callbacks on the request's end.
        var endWaiters: [@Sendable (Result<Void, any Error>) -> Void] = []
    }

    /// A host's set-up slot (``SetUpLimiter``): the host key and the runtime's bound.
    private struct SetUpSlot {
        let host: String
        let limit: Int
    }

    private let state: NIOLockedValueBox<State>
    /// Completed when the head is accepted (true) or ends the stream (false), or failed when the
    /// stream fails before.
    private let headDecided = OneShot<Bool>()
    /// Held for the stream's life: the runtime's event loops, proxy and timers.
    private let runtime: RealtimeRuntime
    private var timers: TimerQueue { runtime.timers }
    private let options: EventStreamOptions
    private let url: String
    private let cookies: CookieStore?
    private let onHead: @Sendable (HTTPResponseHead) -> EventStreamHeadDecision
    private let onOutputs: @Sendable ([EventStream.Output]) -> Bool
    /// The owning client's metrics: body bytes are counted as they arrive.
    private let metrics: ClientMetrics?

    private init(
        url: String, pending: Pending, proxy: ProxyServer?, cookies: CookieStore?, options: EventStreamOptions, runtime: RealtimeRuntime,
        onHead: @escaping @Sendable (HTTPResponseHead) -> EventStreamHeadDecision,
        onOutputs: @escaping @Sendable ([EventStream.Output]) -> Bool,
        metrics: ClientMetrics?
    ) {
        self.url = url
        self.cookies = cookies
        self.options = options
        self.runtime = runtime
        self.metrics = metrics
        self.onHead = onHead
        self.onOutputs = onOutputs
        state = NIOLockedValueBox(State(
            pending: pending,
            parser: SSEParser(
                configuration: {
                    var configuration = SSEParser.Configuration(maxEventSize: options.maxEventSize, emitsComments: options.emitsComments)
                    configuration.unnamedEventType = options.unnamedEventType
                    return configuration
                }(),
                lastEventId: options.lastEventId),
            currentURL: url, currentProxy: proxy))
    }

    /// Body bytes received so far (the event stream as it came over the wire, after HTTP framing).
    public var bytesReceived: Int { state.withLockedValue { $0.bytesReceived } }

    /// The last event ID as of the latest event (at the end: what the next request should send).
    public var lastEventId: String { state.withLockedValue { $0.parser.lastEventId } }

    /// Sends `request` and reads its response as an event stream until it ends.
    ///
    /// - Parameters:
    ///   - request: the streaming GET (headers, timeouts, TLS).
    ///   - runtime: the runtime whose event loops, proxy and timers carry the stream.
    ///   - options: size limits and the idle timeout.
    ///   - onHead: decides on the response head (status, content type), on the event loop.
    ///   - onOutputs: takes the events, `retry` values and comments of one read, on the event
    ///     loop, in order; returns false to pause reading until ``resume()``.
    /// - Returns: how the stream ended.
    /// - Throws: the error `onHead` refused with, ``RealtimeError`` `timeout` (no head within
    ///   `request.headTimeout`, or the idle timeout), `messageTooLarge`, `connectionClosed`,
    ///   `connectFailed`, `tlsFailure`, `certificatePinMismatch`, `proxyFailed`, `protocolViolation`
    ///   (a response that is not HTTP/1.x); `CancellationError` when the task is cancelled.
    @discardableResult
    public static func run(
        _ request: HTTPRequestSpec,
        runtime: RealtimeRuntime = .shared,
        options: EventStreamOptions = .init(),
        onHead: @escaping @Sendable (HTTPResponseHead) -> EventStreamHeadDecision,
        onOutputs: @escaping @Sendable ([EventStream.Output]) -> Bool
    ) async throws -> EventStreamEnd {
        try await open(request, runtime: runtime, options: options, onHead: onHead, onOutputs: onOutputs).finished()
    }

    /// Starts the request and returns the stream at once; ``finished()`` waits for its end.
    public static func open(
        _ request: HTTPRequestSpec,
        runtime: RealtimeRuntime = .shared,
        options: EventStreamOptions = .init(),
        onHead: @escaping @Sendable (HTTPResponseHead) -> EventStreamHeadDecision,
        onOutputs: @escaping @Sendable ([EventStream.Output]) -> Bool
    ) throws -> EventStream {
        try open(request, runtime: runtime, options: options, metrics: nil, onHead: onHead, onOutputs: onOutputs)
    }

    /// ``open(_:runtime:options:onHead:onOutputs:)`` counting body bytes in a client's metrics.
    package static func open(
        _ request: HTTPRequestSpec,
        runtime: RealtimeRuntime,
        options: EventStreamOptions,
        metrics: ClientMetrics?,
        onHead: @escaping @Sendable (HTTPResponseHead) -> EventStreamHeadDecision,
        onOutputs: @escaping @Sendable ([EventStream.Output]) -> Bool
    ) throws -> EventStream {
        let endpoint = try Endpoint(request.url, allowedSchemes: ["http", "https"])
        var headers = request.headers
        runtime.injectTraceContext(request.traceContext, into: &headers)
        // Made now so that unusable TLS options (an unreadable trust file) fail the call itself.
        if endpoint.isSecure { _ = try request.tls.sslContext() }
        let proxy = try runtime.proxy.server(for: endpoint)
        let pending = Pending(method: request.method, headers: headers, body: request.body, endpoint: endpoint, tls: request.tls)
        let stream = EventStream(
            url: request.url, pending: pending, proxy: proxy, cookies: request.cookies, options: options, runtime: runtime,
            onHead: onHead, onOutputs: onOutputs, metrics: metrics)
        let timeout = request.headTimeout
        let send: @Sendable () -> Void = { stream.send(headTimeout: timeout) }
        // Streams to one host are set up maxConnectingPerHost at a time, as WebSockets are: the
        // request waits its turn (no task: a callback) until the head of an earlier one arrives
        // or its request ends. The head timeout counts from the request, not from the wait: each
        // request ahead ends within its own head timeout, so the line always moves, and a stream
        // that waited behind slow heads is not failed for it (an EventSource would only reconnect,
        // with one more request). A stream opened inside a set-up that holds this host's slot
        // (a SignalR start) does not wait for a second one.
        let host = "\(endpoint.host):\(endpoint.port)"
        guard SetUpLimiter.heldHost != host else {
            send()
            return stream
        }
        let slot = SetUpSlot(host: host, limit: runtime.http.maxConnectingPerHost)
        let id = runtime.setUpLimiter.request(host: slot.host, limit: slot.limit, timeout: nil, timers: runtime.timers) { result in
            switch result {
            case .success:
                let go = stream.state.withLockedValue { state -> Bool in
                    state.slotRequest = nil
                    state.slot = slot
                    return state.failure == nil && state.result == nil
                }
                if go { send() } else { stream.end(CancellationError()) }
            case .failure(let error):
                stream.end(error)
            }
        }
        if runtime.setUpLimiter.isWaiting(host: slot.host, id: id) {
            stream.state.withLockedValue { $0.slotRequest = (slot.host, id) }
            // Withdrawn already (fail or cancel before the id was known): leave the line.
            if stream.state.withLockedValue({ $0.failure != nil || $0.result != nil }) {
                runtime.setUpLimiter.cancelRequest(host: slot.host, id: id)
            }
        }
        return stream
    }

    /// The stream's turn came: the head timer starts and the request goes out.
    private func send(headTimeout timeout: Duration) {
        let eventLoop = runtime.eventLoopGroup.next()
        // On real time, as connect deadlines are: a test's manual clock must not hold a connect
        // that never answers.
        let headTimer = eventLoop.scheduleTask(in: TimeAmount(timeout)) { [weak self] in
            guard let self, self.state.withLockedValue({ !$0.headReceived }) else { return }
            self.fail(RealtimeError.timeout("no response from \(Redaction.url(self.url)) within \(timeout)"))
        }
        let attempt = state.withLockedValue { state -> Int? in
            state.headTimer = headTimer
            state.sent = true
            return state.result == nil ? state.attempt : nil
        }
        if let attempt { connect(attempt: attempt, on: eventLoop) } else { headTimer.cancel() }
    }

    /// Opens the connection of request `attempt` (the first, or a redirect's) and sends it.
    private func connect(attempt: Int, on eventLoop: any EventLoop) {
        let prepared: (
            request: ByteBuffer, endpoint: Endpoint, proxy: ProxyServer?, tunnel: ProxyServer?, tls: (NIOSSLContext, TLSOptions)?, isHead: Bool
        )
        do {
            let (pending, proxy) = state.withLockedValue { ($0.pending, $0.currentProxy) }
            guard let pending else { return }
            var headers = pending.headers
            cookies?.apply(to: &headers, url: state.withLockedValue { $0.currentURL })
            // Plain http through an HTTP proxy goes to the proxy in absolute-form, as curl sends it;
            // https is tunnelled with CONNECT (TLS to the server inside the tunnel).
            let form: HTTPStreamRequest.Form = if let proxy, proxy.kind == .http, !pending.endpoint.isSecure {
                .absolute(proxyAuthorization: proxy.basicAuthorization)
            } else {
                .origin
            }
            let request = try HTTPStreamRequest(
                method: pending.method, target: pending.endpoint, headers: headers, body: pending.body, form: form
            ).encoded()
            var tls: (NIOSSLContext, TLSOptions)?
            if pending.endpoint.isSecure {
                tls = (try pending.tls.sslContext(), pending.tls)
            } else if !pending.tls.pinnedPublicKeySHA256.isEmpty, pending.redirects > 0 {
                throw RealtimeError(
                    .certificatePinMismatch, "a redirect to \(Redaction.url(state.withLockedValue { $0.currentURL })) leaves TLS, and keys are pinned")
            }
            prepared = (request, pending.endpoint, proxy, form == .origin ? proxy : nil, tls, pending.method == .HEAD)
        } catch {
            return connectionEnded(error, attempt: attempt)
        }
        let url = state.withLockedValue { $0.currentURL }
        let target = prepared.endpoint
        let install: @Sendable (any Channel) throws -> Void = { [self] channel in
            let pipeline = channel.pipeline.syncOperations
            if let (context, options) = prepared.tls {
                try SocketConnection.addTLS(
                    to: pipeline, context: context, serverName: options.serverName ?? target.host, pins: options.pinnedPublicKeySHA256)
            }
            try pipeline.addHandler(HTTPStreamHandler(stream: self, attempt: attempt, request: prepared.request, isHeadRequest: prepared.isHead))
        }
        let (host, port) = prepared.proxy.map { ($0.host, $0.port) } ?? (target.host, target.port)
        let bootstrap = SocketConnection.bootstrap(on: eventLoop, connectTimeout: runtime.http.connectTimeout, allowRemoteHalfClosure: false)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    // Attached before the connect: a cancel or a failure meanwhile closes it.
                    guard attach(channel, attempt: attempt) else { throw CancellationError() }
                    if prepared.tunnel == nil { try install(channel) }
                }
            }
        // The tunnel's handlers go on only once the connect succeeded: installed before it, a connect
        // that failed would also fail the tunnel ("abandoned"), a second report racing the first.
        SocketConnection.connect(bootstrap, host: host, port: port).whenComplete { [self] result in
            switch result {
            case .failure(let error):
                connectionEnded(error, attempt: attempt)
            case .success(let channel):
                guard let proxy = prepared.tunnel else { return }
                ProxyTunnel.open(
                    through: proxy, to: target.host, port: target.port, url: url, on: channel, then: install,
                    failed: { [self] error in connectionEnded(error, attempt: attempt) })
            }
        }
    }

    /// Keeps the channel of request `attempt`; false when the stream ended or moved on meanwhile.
    private func attach(_ channel: any Channel, attempt: Int) -> Bool {
        state.withLockedValue { state in
            guard state.attempt == attempt, state.result == nil, state.failure == nil else { return false }
            state.channel = channel
            return true
        }
    }

    /// Ends the stream once: `error` nil when the response was read to its end. What failed first
    /// (``fail(_:)``, ``cancel()``, a refusal) is what the stream reports.
    fileprivate func end(_ error: (any Error)?) {
        let ended = state.withLockedValue { state -> (Result<Void, any Error>, [@Sendable (Result<Void, any Error>) -> Void], (any Channel)?)? in
            guard state.result == nil else { return nil }
            cancelTimers(&state)
            state.parser.finish()
            state.outputs = []
            state.pending = nil
            let result: Result<Void, any Error>
            if state.finishedAtHead {
                result = .success(())
            } else if let failure = state.failure {
                result = .failure(failure)
            } else if let refusal = state.refusal {
                result = .failure(refusal(Self.text(state.excerpt)))
            } else if let error {
                if let error = error as? RealtimeError, error.code != .connectionClosed {
                    // A body that breaks HTTP's framing, or the parser's own limits.
                    result = .failure(error)
                } else if state.headReceived {
                    let mapped = SocketConnection.mapError(error, url: state.currentURL, established: true)
                    if let closed = mapped as? RealtimeError, closed.code == .connectionClosed {
                        result = .failure(closed)
                    } else {
                        result = .failure(RealtimeError(
                            .connectionClosed, "the connection to \(Redaction.url(url)) was lost mid-stream", stage: .established,
                            underlying: error))
                    }
                } else {
                    result = .failure(Self.mapSetUpError(error, url: state.currentURL, proxy: state.currentProxy))
                }
            } else {
                result = .success(())
            }
            if case .failure(let failure) = result { state.failure = failure }
            state.result = result
            defer {
                state.endWaiters = []
                state.channel = nil
            }
            return (result, state.endWaiters, state.channel)
        }
        guard let (result, waiters, channel) = ended else { return }
        channel?.close(promise: nil)
        releaseSlot()
        switch result {
        case .success: headDecided.complete(.success(false))
        case .failure(let error): headDecided.complete(.failure(error))
        }
        for waiter in waiters { waiter(result) }
    }

    /// What a failure before the response head is called.
    private static func mapSetUpError(_ error: any Error, url: String, proxy: ProxyServer?) -> any Error {
        if let proxy, let failure = ProxyTunnel.mapError(error, proxy: proxy, url: url) { return failure }
        if let error = error as? RealtimeError, error.code == .connectionClosed {
            return RealtimeError(.connectionClosed, "the server closed the connection to \(Redaction.url(url)) before answering", underlying: error)
        }
        return SocketConnection.mapError(error, url: url)
    }

    /// Gives back the set-up slot, once: at the head, or when the request ends without one.
    private func releaseSlot() {
        guard let slot = state.withLockedValue({ state in defer { state.slot = nil }; return state.slot }) else { return }
        runtime.setUpLimiter.release(host: slot.host, limit: slot.limit)
    }

    /// Runs `callback` with the request's end: at once when the stream has ended.
    private func whenRequestEnds(_ callback: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        let result = state.withLockedValue { state -> Result<Void, any Error>? in
            if let result = state.result { return result }
            state.endWaiters.append(callback)
            return nil
        }
        if let result { callback(result) }
    }

    /// Waits until the response head was accepted (true), or answered ``EventStreamHeadDecision/finish``
    /// (false); throws what ended the stream before (a refusal, a failed connect).
    @discardableResult
    public func accepted() async throws -> Bool {
        do {
            return try await headDecided.value()
        } catch {
            throw state.withLockedValue({ $0.failure }) ?? error
        }
    }

    /// Waits until the stream ends; cancelling the waiting task cancels the request.
    public func finished() async throws -> EventStreamEnd {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                whenRequestEnds { continuation.resume(with: $0) }
            }
        } onCancel: {
            cancel()
        }
        return state.withLockedValue { $0.finishedAtHead } ? .finishedAtHead : .ended
    }

    /// Calls `callback` once the stream has ended, with what ``finished()`` would return or throw
    /// (`CancellationError` after ``cancel()``): for an owner that waits without a task.
    public func whenFinished(_ callback: @escaping @Sendable (Result<EventStreamEnd, any Error>) -> Void) {
        whenRequestEnds { result in
            callback(result.map { self.state.withLockedValue { $0.finishedAtHead } ? .finishedAtHead : .ended })
        }
    }

    /// Whether reading is paused because `onOutputs` said the consumer is behind.
    public var isPaused: Bool { state.withLockedValue { $0.paused } }

    /// Lets a stream paused by `onOutputs` read again (may be called before the pause took hold).
    public func resume() {
        let channel = state.withLockedValue { state -> (any Channel)? in
            state.lastActivity = timers.now
            guard state.paused else {
                state.resumeRequested = true
                return nil
            }
            state.paused = false
            return state.channel
        }
        channel?.triggerUserOutboundEvent(HTTPStreamHandler.Resume(), promise: nil)
    }

    /// Ends the stream with `error` (the first failure wins).
    public func fail(_ error: any Error) {
        let (channel, waiting, sent) = state.withLockedValue { state -> ((any Channel)?, (host: String, id: UInt64)?, Bool) in
            if state.failure == nil, state.result == nil { state.failure = error }
            return (state.channel, state.slotRequest, state.sent)
        }
        if let channel {
            // The handler sees the close and ends the stream with the failure recorded here. A
            // channel closed before its handler was installed (its proxy tunnel still being set
            // up) has none to see it: its close ends the stream, which gives back its set-up slot
            // (else every later attempt to the host waited in line for it, and never reconnected).
            channel.close(promise: nil)
            channel.closeFuture.whenComplete { _ in self.end(error) }
        } else if !sent {
            withdraw(waiting)
            if waiting == nil { end(error) }
        }
    }

    /// Cancels the request; ``finished()`` throws `CancellationError`.
    public func cancel() {
        fail(CancellationError())
    }

    /// Takes a stream whose request has not gone out yet out of the set-up line (`request`: while
    /// it waits; nil: its turn came and the request is about to go, or it has ended).
    private func withdraw(_ request: (host: String, id: UInt64)?) {
        guard let request else { return }
        runtime.setUpLimiter.cancelRequest(host: request.host, id: request.id)
    }

    // MARK: The connection's reports (on the event loop, from HTTPStreamHandler)

    /// The response head of request `attempt`; returns whether to read its body.
    func connectionReceivedHead(status: HTTPResponseStatus, headers: HTTPHeaders, attempt: Int) -> Bool {
        let current = state.withLockedValue { state -> String? in
            state.attempt == attempt && state.result == nil ? state.currentURL : nil
        }
        guard let current else { return false }
        // Through an HTTP proxy in absolute-form, a 407 is the proxy's refusal, not the server's answer.
        let forwardedBy = state.withLockedValue { state -> ProxyServer? in
            guard let proxy = state.currentProxy, proxy.kind == .http, state.pending?.endpoint.isSecure == false else { return nil }
            return proxy
        }
        if let proxy = forwardedBy, let refusal = ProxyTunnel.forwardRefusal(status: status, proxy: proxy, url: current) {
            end(refusal)
            return false
        }
        cookies?.record(headers, from: current)
        if [301, 302, 303, 307, 308].contains(status.code), let location = headers.first(name: "location") {
            redirect(to: location, status: status, from: current)
            return false
        }
        // The set-up is over: the next stream to this host may start.
        releaseSlot()
        let decision = onHead(HTTPResponseHead(status: status, headers: headers, url: current))
        state.withLockedValue { state in
            state.headReceived = true
            state.pending = nil
            state.headTimer?.cancel()
            state.headTimer = nil
            switch decision {
            case .accept:
                state.lastActivity = timers.now
                if let idle = options.idleTimeout { state.idleTimer = scheduleIdleCheck(at: state.lastActivity + idle) }
            case .finish:
                state.finishedAtHead = true
            case .refuse(let makeError):
                state.refusal = makeError
                // A body that neither ends nor fills the excerpt: the refusal goes with what came.
                if let channel = state.channel {
                    state.headTimer = channel.eventLoop.scheduleTask(in: TimeAmount(Self.refusalExcerptWait)) {
                        channel.close(promise: nil)
                    }
                }
            }
        }
        switch decision {
        case .accept:
            headDecided.complete(.success(true))
            return true
        case .finish:
            // A finished stream reads nothing more.
            headDecided.complete(.success(false))
            end(nil)
            return false
        case .refuse:
            return true
        }
    }

    /// Follows a redirect: the next request goes out on a connection of its own.
    private func redirect(to location: String, status: HTTPResponseStatus, from current: String) {
        enum Next { case go(Int, any EventLoop), failed(any Error), ended }
        let next = state.withLockedValue { state -> Next in
            guard var pending = state.pending, let channel = state.channel else { return .ended }
            guard pending.redirects < 10 else {
                return .failed(RealtimeError(.connectFailed, "\(Redaction.url(url)) redirected more than 10 times", status: status))
            }
            guard let resolved = URL(string: location, relativeTo: URL(string: current))?.absoluteURL.absoluteString,
                let endpoint = try? Endpoint(resolved, allowedSchemes: ["http", "https"])
            else {
                return .failed(RealtimeError(.invalidURL, "\(Redaction.url(current)) redirected to an unusable URL", status: status))
            }
            pending.visited.insert(current)
            guard !pending.visited.contains(resolved) else {
                return .failed(RealtimeError(.connectFailed, "\(Redaction.url(current)) redirected in a cycle", status: status))
            }
            let proxy: ProxyServer?
            do {
                proxy = try runtime.proxy.server(for: endpoint)
            } catch {
                return .failed(error)
            }
            if status.code == 303 || (status.code != 307 && status.code != 308 && pending.method == .POST) {
                pending.method = .GET
                pending.body = nil
            }
            let old = pending.endpoint
            if old.scheme != endpoint.scheme || old.host != endpoint.host || old.port != endpoint.port {
                // As browsers do: credentials meant for one origin do not follow a redirect to another.
                pending.headers.remove(name: "authorization")
                pending.headers.remove(name: "cookie")
            }
            pending.endpoint = endpoint
            pending.redirects += 1
            state.pending = pending
            state.currentURL = resolved
            state.currentProxy = proxy
            state.attempt += 1
            state.channel = nil
            return .go(state.attempt, channel.eventLoop)
        }
        switch next {
        case .go(let attempt, let eventLoop): connect(attempt: attempt, on: eventLoop)
        case .failed(let error): end(error)
        case .ended: break
        }
    }

    /// Body bytes of the current read: parsed now, handed over at the read's end.
    func connectionReceivedBody(_ buffer: ByteBuffer, attempt: Int) {
        enum Step { case nothing, failed(any Error) }
        let step = state.withLockedValue { state -> Step in
            guard state.attempt == attempt, state.result == nil, !state.finishedAtHead else { return .nothing }
            if let refusal = state.refusal {
                var part = buffer
                var excerpt = state.excerpt ?? ByteBuffer()
                let room = 512 - excerpt.readableBytes
                if room > 0, let slice = part.readSlice(length: min(room, part.readableBytes)) { excerpt.writeImmutableBuffer(slice) }
                state.excerpt = excerpt
                guard excerpt.readableBytes >= 512 else { return .nothing }
                return .failed(refusal(Self.text(excerpt)))
            }
            state.lastActivity = timers.now
            state.bytesReceived += buffer.readableBytes
            metrics?.received(messages: 0, bytes: buffer.readableBytes)
            do {
                try state.parser.parse(buffer) { state.outputs.append($0) }
            } catch {
                return .failed(error)
            }
            return .nothing
        }
        if case .failed(let error) = step { fail(error) }
    }

    /// The end of a read: its events go to `onOutputs`. Returns whether to go on reading.
    func connectionReadComplete(attempt: Int) -> Bool {
        let outputs = state.withLockedValue { state -> [EventStream.Output] in
            guard state.attempt == attempt, !state.outputs.isEmpty else { return [] }
            // Taken out, not kept for reuse: a quiet stream would keep the last read's events
            // (their data, up to the maximum event size) until the next read.
            defer { state.outputs = [] }
            return state.outputs
        }
        if outputs.isEmpty || onOutputs(outputs) { return true }
        return state.withLockedValue { state -> Bool in
            if state.resumeRequested {
                state.resumeRequested = false
                return true
            }
            state.paused = true
            return false
        }
    }

    /// The current connection's receive buffer (nil: no connection yet): the size of its next read
    /// and how many reads one wake-up makes. For tests of what a quiet stream keeps.
    func receiveBuffer() async throws -> (nextSize: Int, readsPerWakeUp: UInt)? {
        guard let channel = state.withLockedValue({ $0.channel }) else { return nil }
        return try await SocketConnection.receiveBuffer(of: channel)
    }

    /// Request `attempt`'s connection ended: `error` nil when its response was complete.
    func connectionEnded(_ error: (any Error)?, attempt: Int) {
        guard state.withLockedValue({ $0.attempt == attempt }) else { return }
        end(error)
    }

    private static func text(_ excerpt: ByteBuffer?) -> String? {
        guard let excerpt, excerpt.readableBytes > 0 else { return nil }
        return String(decoding: excerpt.readableBytesView, as: UTF8.self)
    }

    private func cancelTimers(_ state: inout State) {
        if let timer = state.idleTimer { timers.cancel(timer) }
        state.headTimer?.cancel()
        state.idleTimer = nil
        state.headTimer = nil
    }

    /// The idle check: fires at the last byte + the idle timeout; while paused, looks again later.
    private func scheduleIdleCheck(at deadline: Duration) -> TimerQueue.Timer {
        timers.schedule(at: deadline) { [weak self] in self?.idleCheck() }
    }

    private func idleCheck() {
        guard let idle = options.idleTimeout else { return }
        let expired = state.withLockedValue { state -> Bool in
            guard state.result == nil else { return false }
            let now = timers.now
            if state.paused {
                state.idleTimer = scheduleIdleCheck(at: now + idle)
                return false
            }
            let deadline = state.lastActivity + idle
            if now < deadline {
                state.idleTimer = scheduleIdleCheck(at: deadline)
                return false
            }
            state.idleTimer = nil
            return true
        }
        if expired { fail(RealtimeError.timeout("no bytes from \(Redaction.url(url)) for \(idle)").at(.established)) }
    }
}
