import AsyncHTTPClient
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1

/// What an event stream does with the response head (see ``EventStream/run(_:runtime:options:onHead:onOutputs:)``).
public enum EventStreamHeadDecision: Sendable {
    /// Read the body as Server-Sent Events.
    case accept
    /// End at once without reading the body (EventSource's 204 "do not reconnect").
    case finish
    /// Refuse the response: read up to 512 bytes of its body, then fail with the error made from
    /// that excerpt (nil when the body was empty).
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
/// The head goes to `onHead` and every body part's events go to `onOutputs` in one array, both on
/// the event loop and in stream order, with no task in between: a consumer that reads from an
/// `InboundBuffer` fed by `onOutputs` is woken once per read, however many events the read
/// carried. `onOutputs` answers whether to go on reading; after `false`, reading waits (the server's
/// writes wait on TCP, and the idle timeout does not count) until ``resume()`` is called. The caller
/// supplies the protocol's rules: what a status or content type means, what the events mean.
public final class EventStream: Sendable {
    /// What the stream hands over, in stream order: events, `retry` values, comments.
    public typealias Output = SSEParser.Output
    private struct State {
        var task: HTTPClient.Task<Void>?
        var parser: SSEParser
        var head: HTTPResponseHead?
        var refusal: (@Sendable (String?) -> any Error)?
        var excerpt: ByteBuffer?
        /// The URL that answered, after redirects.
        var finalURL: String?
        var pause: EventLoopPromise<Void>?
        var resumeRequested = false
        var lastActivity: Duration = .zero
        var idleTimer: TimerQueue.Timer?
        var headTimer: Scheduled<Void>?
        var failure: (any Error)?
        var finishedAtHead = false
        var done = false
        var bytesReceived = 0
        /// The set-up slot this stream holds (given back at the head, or when the request ends).
        var slot: SetUpSlot?
        /// The slot request while it waits in line, for ``cancel()`` to withdraw it.
        var slotRequest: (host: String, id: UInt64)?
        /// Callbacks on the request's end, registered before the request was sent.
        var endWaiters: [@Sendable (Result<Void, any Error>) -> Void] = []
        /// The stream ended before its request was sent (cancelled or failed while it waited its turn).
        var endedUnsent: (any Error)?
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
    /// Held for the stream's life: the runtime's own HTTP clients shut down with its last copy.
    private let runtime: RealtimeRuntime
    private var timers: TimerQueue { runtime.timers }
    private let options: EventStreamOptions
    private let url: String
    /// The proxy the request goes through (nil: none), named in a proxy's failure.
    private let proxy: ProxyServer?
    private let onHead: @Sendable (HTTPResponseHead) -> EventStreamHeadDecision
    private let onOutputs: @Sendable ([EventStream.Output]) -> Bool
    /// The owning client's metrics: body bytes are counted as they arrive.
    private let metrics: ClientMetrics?

    private init(
        url: String, proxy: ProxyServer?, options: EventStreamOptions, runtime: RealtimeRuntime,
        onHead: @escaping @Sendable (HTTPResponseHead) -> EventStreamHeadDecision,
        onOutputs: @escaping @Sendable ([EventStream.Output]) -> Bool,
        metrics: ClientMetrics?
    ) {
        self.url = url
        self.proxy = proxy
        self.options = options
        self.runtime = runtime
        self.metrics = metrics
        self.onHead = onHead
        self.onOutputs = onOutputs
        state = NIOLockedValueBox(State(parser: SSEParser(
            configuration: .init(maxEventSize: options.maxEventSize, emitsComments: options.emitsComments),
            lastEventId: options.lastEventId)))
    }

    /// Body bytes received so far (the event stream as it came over the wire, after HTTP framing).
    public var bytesReceived: Int { state.withLockedValue { $0.bytesReceived } }

    /// The last event ID as of the latest event (at the end: what the next request should send).
    public var lastEventId: String { state.withLockedValue { $0.parser.lastEventId } }

    /// Sends `request` and reads its response as an event stream until it ends.
    ///
    /// - Parameters:
    ///   - request: the streaming GET (headers, timeouts, TLS).
    ///   - runtime: the runtime whose HTTP client and event loops carry the stream.
    ///   - options: size limits and the idle timeout.
    ///   - onHead: decides on the response head (status, content type), on the event loop.
    ///   - onOutputs: takes the events, `retry` values and comments of one body part, on the event
    ///     loop, in order; returns false to pause reading until ``resume()``.
    /// - Returns: how the stream ended.
    /// - Throws: the error `onHead` refused with, ``RealtimeError`` `timeout` (no head within
    ///   `request.headTimeout`, or the idle timeout), `messageTooLarge`, `connectionClosed`,
    ///   `connectFailed`, `tlsFailure`; `CancellationError` when the task is cancelled.
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
        let (client, clientRequest, proxy) = try request.prepareForDelegate(runtime: runtime)
        let stream = EventStream(
            url: request.url, proxy: proxy, options: options, runtime: runtime, onHead: onHead, onOutputs: onOutputs, metrics: metrics)
        let timeout = request.headTimeout
        let timeoutError = RealtimeError.timeout("no response from \(Redaction.url(request.url)) within \(timeout)")
        let send: @Sendable () -> Void = { [cookies = request.cookies] in
            let delegate = Delegate(stream: stream, cookies: cookies)
            let task = client.execute(request: clientRequest, delegate: delegate, logger: runtime.libraryLogger)
            // On real time, as async-http-client's own request deadlines are: a test's manual clock
            // must not hold a connect that never answers.
            let headTimer = task.eventLoop.scheduleTask(in: TimeAmount(timeout)) { [weak stream] in
                guard let stream, stream.state.withLockedValue({ $0.head == nil }) else { return }
                stream.fail(timeoutError)
            }
            stream.sent(task, headTimer: headTimer)
        }
        // Streams to one host are set up maxConnectingPerHost at a time, as WebSockets are: the
        // request waits its turn (no task: a callback) until the head of an earlier one arrives
        // or its request ends. The head timeout counts from the request, not from the wait: each
        // request ahead ends within its own head timeout, so the line always moves, and a stream
        // that waited behind slow heads is not failed for it (an EventSource would only reconnect,
        // with one more request). A stream opened inside a set-up that holds this host's slot
        // (a SignalR start) does not wait for a second one.
        let endpoint = try Endpoint(request.url, allowedSchemes: ["http", "https"])
        let host = "\(endpoint.host):\(endpoint.port)"
        guard SetUpLimiter.heldHost != host else {
            send()
            return stream
        }
        let slot = SetUpSlot(host: host, limit: runtime.http.maxConnectingPerHost)
        let id = runtime.setUpLimiter.request(
            host: slot.host, limit: slot.limit, within: nil, timers: runtime.timers, timeoutError: timeoutError
        ) { result in
            switch result {
            case .success:
                let go = stream.state.withLockedValue { state -> Bool in
                    state.slotRequest = nil
                    state.slot = slot
                    return state.failure == nil && state.endedUnsent == nil
                }
                if go { send() } else { stream.endUnsent(CancellationError()) }
            case .failure(let error):
                stream.endUnsent(error)
            }
        }
        if runtime.setUpLimiter.isWaiting(host: slot.host, id: id) {
            stream.state.withLockedValue { $0.slotRequest = (slot.host, id) }
            // Withdrawn already (fail or cancel before the id was known): leave the line.
            if stream.state.withLockedValue({ $0.failure != nil || $0.endedUnsent != nil }) {
                runtime.setUpLimiter.cancelRequest(host: slot.host, id: id)
            }
        }
        return stream
    }

    /// The request went out (its set-up turn came): callbacks registered before it follow it now.
    private func sent(_ task: HTTPClient.Task<Void>, headTimer: Scheduled<Void>) {
        let (waiters, failure) = state.withLockedValue { state in
            state.task = task
            state.headTimer = headTimer
            defer { state.endWaiters = [] }
            return (state.endWaiters, state.failure)
        }
        for waiter in waiters { task.futureResult.whenComplete(waiter) }
        // Cancelled or failed as its turn came, before the task was known here.
        if failure is CancellationError { task.cancel() } else if let failure { task.fail(reason: failure) }
        // Whatever ended the request, its slot is free once it has ended.
        task.futureResult.whenComplete { _ in self.releaseSlot() }
    }

    /// The stream ends before its request went out: it was cancelled or failed while it waited.
    private func endUnsent(_ error: any Error) {
        let (waiters, ended) = state.withLockedValue { state -> ([@Sendable (Result<Void, any Error>) -> Void], any Error) in
            let ended = state.failure ?? error
            state.failure = ended
            state.endedUnsent = ended
            state.done = true
            defer { state.endWaiters = [] }
            return (state.endWaiters, ended)
        }
        releaseSlot()
        headDecided.complete(.failure(ended))
        for waiter in waiters { waiter(.failure(ended)) }
    }

    /// Gives back the set-up slot, once: at the head, or when the request ends without one.
    private func releaseSlot() {
        guard let slot = state.withLockedValue({ state in defer { state.slot = nil }; return state.slot }) else { return }
        runtime.setUpLimiter.release(host: slot.host, limit: slot.limit)
    }

    /// Runs `callback` with the request's end: at once when the stream ended before it was sent.
    private func whenRequestEnds(_ callback: @escaping @Sendable (Result<Void, any Error>) -> Void) {
        enum Now { case task(HTTPClient.Task<Void>), ended(any Error), later }
        let now = state.withLockedValue { state -> Now in
            if let task = state.task { return .task(task) }
            if let ended = state.endedUnsent { return .ended(ended) }
            state.endWaiters.append(callback)
            return .later
        }
        switch now {
        case .task(let task): task.futureResult.whenComplete(callback)
        case .ended(let error): callback(.failure(error))
        case .later: break
        }
    }

    /// Waits until the response head was accepted (true), or answered ``EventStreamHeadDecision/finish``
    /// (false); throws what ended the stream before (a refusal, a failed connect).
    @discardableResult
    public func accepted() async throws -> Bool {
        do {
            return try await headDecided.value()
        } catch {
            if let recorded = state.withLockedValue({ $0.failure }) { throw recorded }
            throw HTTPTransport.mapError(error, url: url, proxy: proxy)
        }
    }

    /// Waits until the stream ends; cancelling the waiting task cancels the request.
    public func finished() async throws -> EventStreamEnd {
        do {
            try await withTaskCancellationHandler {
                try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                    whenRequestEnds { continuation.resume(with: $0) }
                }
            } onCancel: {
                cancel()
            }
        } catch {
            let (recorded, finishedAtHead) = state.withLockedValue { ($0.failure, $0.finishedAtHead) }
            if finishedAtHead { return .finishedAtHead }
            if let recorded { throw recorded }
            if Task.isCancelled { throw CancellationError() }
            throw HTTPTransport.mapError(error, url: url, proxy: proxy)
        }
        return state.withLockedValue { $0.finishedAtHead } ? .finishedAtHead : .ended
    }

    /// Calls `callback` once the stream has ended, with what ``finished()`` would return or throw
    /// (`CancellationError` after ``cancel()``): for an owner that waits without a task.
    public func whenFinished(_ callback: @escaping @Sendable (Result<EventStreamEnd, any Error>) -> Void) {
        whenRequestEnds { result in
            switch result {
            case .success:
                callback(.success(self.state.withLockedValue { $0.finishedAtHead } ? .finishedAtHead : .ended))
            case .failure(let error):
                let (recorded, finishedAtHead) = self.state.withLockedValue { ($0.failure, $0.finishedAtHead) }
                if finishedAtHead { return callback(.success(.finishedAtHead)) }
                if let recorded { return callback(.failure(recorded)) }
                callback(.failure(HTTPTransport.mapError(error, url: self.url, proxy: self.proxy)))
            }
        }
    }

    /// Whether reading is paused because `onOutputs` said the consumer is behind.
    public var isPaused: Bool { state.withLockedValue { $0.pause != nil } }

    /// Lets a stream paused by `onOutputs` read again (may be called before the pause took hold).
    public func resume() {
        let promise = state.withLockedValue { state -> EventLoopPromise<Void>? in
            state.lastActivity = timers.now
            guard let pause = state.pause else {
                state.resumeRequested = true
                return nil
            }
            state.pause = nil
            return pause
        }
        promise?.succeed()
    }

    /// Ends the stream with `error` (the first failure wins).
    public func fail(_ error: any Error) {
        let (task, waiting) = state.withLockedValue { state -> (HTTPClient.Task<Void>?, (host: String, id: UInt64)?) in
            if state.failure == nil, !state.done { state.failure = error }
            return (state.task, state.slotRequest)
        }
        task?.fail(reason: error)
        if task == nil { withdraw(waiting) }
    }

    /// Cancels the request; ``finished()`` throws `CancellationError`.
    public func cancel() {
        let (task, waiting) = state.withLockedValue { state -> (HTTPClient.Task<Void>?, (host: String, id: UInt64)?) in
            if state.task == nil, state.failure == nil, !state.done { state.failure = CancellationError() }
            return (state.task, state.slotRequest)
        }
        task?.cancel()
        if task == nil { withdraw(waiting) }
    }

    /// Takes a stream whose request has not gone out yet out of the set-up line (`request`: while
    /// it waits; nil: its turn came and the request is about to go, or it has ended).
    private func withdraw(_ request: (host: String, id: UInt64)?) {
        guard let request else { return }
        runtime.setUpLimiter.cancelRequest(host: request.host, id: request.id)
    }

    // MARK: Delegate callbacks (on the event loop)

    fileprivate func receivedHead(_ head: HTTPResponseHead, eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        // The set-up is over: the next stream to this host may start.
        releaseSlot()
        let decision = onHead(head)
        let task = state.withLockedValue { state -> HTTPClient.Task<Void>? in
            state.head = head
            state.headTimer?.cancel()
            state.headTimer = nil
            switch decision {
            case .accept:
                state.lastActivity = timers.now
                if let idle = options.idleTimeout { state.idleTimer = scheduleIdleCheck(at: state.lastActivity + idle) }
                return nil
            case .finish:
                state.finishedAtHead = true
                return state.task
            case .refuse(let makeError):
                state.refusal = makeError
                return nil
            }
        }
        // A finished stream reads nothing more: cancelling the task ends it (finished() reports
        // finishedAtHead, not the cancellation).
        task?.cancel()
        switch decision {
        case .accept: headDecided.complete(.success(true))
        case .finish: headDecided.complete(.success(false))
        case .refuse: break
        }
        return eventLoop.makeSucceededVoidFuture()
    }

    fileprivate func receivedBodyPart(_ buffer: ByteBuffer, eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        enum Step { case deliver([EventStream.Output]), refuseNow(any Error), nothing, failed(any Error) }
        let step = state.withLockedValue { state -> Step in
            if state.done || state.finishedAtHead { return .nothing }
            if let refusal = state.refusal {
                var part = buffer
                var excerpt = state.excerpt ?? ByteBuffer()
                let room = 512 - excerpt.readableBytes
                if room > 0, let slice = part.readSlice(length: min(room, part.readableBytes)) { excerpt.writeImmutableBuffer(slice) }
                state.excerpt = excerpt
                guard excerpt.readableBytes >= 512 else { return .nothing }
                return .refuseNow(refusal(Self.text(excerpt)))
            }
            state.lastActivity = timers.now
            state.bytesReceived += buffer.readableBytes
            metrics?.received(messages: 0, bytes: buffer.readableBytes)
            // A local array, not one kept in the state for reuse: a quiet stream would keep the
            // last part's events (their data, up to the maximum event size) until the next part.
            var outputs: [EventStream.Output] = []
            do {
                try state.parser.parse(buffer) { outputs.append($0) }
            } catch {
                return .failed(error)
            }
            return outputs.isEmpty ? .nothing : .deliver(outputs)
        }
        switch step {
        case .nothing:
            return eventLoop.makeSucceededVoidFuture()
        case .refuseNow(let error), .failed(let error):
            fail(error)
            return eventLoop.makeSucceededVoidFuture()
        case .deliver(let outputs):
            if onOutputs(outputs) { return eventLoop.makeSucceededVoidFuture() }
            return state.withLockedValue { state -> EventLoopFuture<Void> in
                if state.resumeRequested {
                    state.resumeRequested = false
                    return eventLoop.makeSucceededVoidFuture()
                }
                let promise = eventLoop.makePromise(of: Void.self)
                state.pause = promise
                return promise.futureResult
            }
        }
    }

    fileprivate func receivedEnd() throws {
        let error = state.withLockedValue { state -> (any Error)? in
            state.done = true
            cancelTimers(&state)
            state.parser.finish()
            guard let refusal = state.refusal else { return nil }
            let error = refusal(Self.text(state.excerpt))
            if state.failure == nil { state.failure = error }
            return error
        }
        if let error {
            headDecided.complete(.failure(error))
            throw error
        }
    }

    private static func text(_ excerpt: ByteBuffer?) -> String? {
        guard let excerpt, excerpt.readableBytes > 0 else { return nil }
        return String(decoding: excerpt.readableBytesView, as: UTF8.self)
    }

    fileprivate func visited(_ url: String) {
        state.withLockedValue { $0.finalURL = url }
    }

    fileprivate var answeringURL: String { state.withLockedValue { $0.finalURL } ?? url }

    fileprivate func receivedError(_ error: any Error) {
        let pause = state.withLockedValue { state -> EventLoopPromise<Void>? in
            state.done = true
            cancelTimers(&state)
            state.parser.finish()
            // A refused response cut short still fails with the refusal; an accepted one that fails
            // midway lost its connection.
            if state.failure == nil, !state.finishedAtHead {
                if let refusal = state.refusal {
                    state.failure = refusal(Self.text(state.excerpt))
                } else if state.head != nil, !(error is RealtimeError) {
                    let mapped = HTTPTransport.mapError(error, url: url, proxy: proxy)
                    if !(mapped is CancellationError) {
                        state.failure = (mapped as? RealtimeError).flatMap { $0.code == .connectionClosed ? $0 : nil }
                            ?? RealtimeError(.connectionClosed, "the connection to \(Redaction.url(url)) was lost mid-stream", underlying: error)
                    }
                }
            }
            defer { state.pause = nil }
            return state.pause
        }
        pause?.succeed()
        headDecided.complete(.failure(state.withLockedValue { $0.failure } ?? error))
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
            guard !state.done else { return false }
            let now = timers.now
            if state.pause != nil {
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
        if expired { fail(RealtimeError.timeout("no bytes from \(Redaction.url(url)) for \(idle)")) }
    }

    /// Forwards async-http-client's callbacks to the stream.
    private final class Delegate: HTTPClientResponseDelegate {
        typealias Response = Void
        let stream: EventStream
        let cookies: CookieStore?

        init(stream: EventStream, cookies: CookieStore?) {
            self.stream = stream
            self.cookies = cookies
        }

        func didVisitURL(task: HTTPClient.Task<Void>, _ request: HTTPClient.Request, _ head: NIOHTTP1.HTTPResponseHead) {
            let visited = request.url.absoluteString
            cookies?.record(head.headers, from: visited)
            stream.visited(visited)
        }

        func didReceiveHead(task: HTTPClient.Task<Void>, _ head: NIOHTTP1.HTTPResponseHead) -> EventLoopFuture<Void> {
            stream.receivedHead(
                HTTPResponseHead(status: head.status, headers: head.headers, url: stream.answeringURL), eventLoop: task.eventLoop)
        }

        func didReceiveBodyPart(task: HTTPClient.Task<Void>, _ buffer: ByteBuffer) -> EventLoopFuture<Void> {
            stream.receivedBodyPart(buffer, eventLoop: task.eventLoop)
        }

        func didReceiveError(task: HTTPClient.Task<Void>, _ error: any Error) {
            stream.receivedError(error)
        }

        func didFinishRequest(task: HTTPClient.Task<Void>) throws {
            try stream.receivedEnd()
        }
    }
}
