#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
@_spi(RealtimeEngine) public import RealtimeCore
public import ServiceLifecycle
import Tracing

/// A WHATWG EventSource: one Server-Sent Events stream, reconnected with the last event ID.
///
/// ```swift
/// let source = EventSource(url: url, configuration: .init())
/// for try await event in source.events { print(event.type, event.data) }
/// ```
/// Iterating ``events`` (or ``updates``) starts the connection (or run it as a `Service` with
/// ``run()``). ``events`` ends when ``close()`` is called or the server answers 204; it throws a
/// `RealtimeError` when the connection fails for good (a status other than 200, a content type
/// other than `text/event-stream`, an event over `maxEventSize`, or the reconnect policy giving up).
/// ``updates`` carries the same events in the same order, with the comments (on request) and a
/// notice for every open and every failure, saying whether it will be retried.
///
/// Memory: events are buffered for the sequence only while an iterator exists, and at most
/// ``EventSourceConfiguration/bufferSize`` of them; while the consumer is that far behind, the
/// client stops reading the connection (the server's writes then wait on TCP), and the idle timeout
/// does not count that time. When the last iterator is gone (a loop that broke out), what was
/// buffered for it is let go and reading goes on; a later iterator starts with what arrives after
/// it. Callbacks (`onComment`, and the IKEventSource module's) are called before the event is
/// buffered, in order, and never buffer anything.
public final class EventSource: Service, Sendable {
    /// The stream's URL.
    public let url: URL
    /// The configuration the source was made with.
    public let configuration: EventSourceConfiguration
    let runtime: RealtimeRuntime
    let state: NIOLockedValueBox<LoopState>
    let buffer: InboundBuffer<EventSourceUpdate>
    /// The reconnect rules every client runs, driven from the stream's callbacks: no task waits
    /// while a source is connected or a retry is due.
    let driver: ReconnectDriver
    /// Completed when the source has stopped for good (``run()`` waits for it).
    let ended = OneShot<Void>()
    let metrics: ClientMetrics
    /// The observer of the IKEventSource module (see EventSource+Callbacks.swift), kept here.
    package var callbacks: CallbackAccess { CallbackAccess(source: self) }

    struct LoopState {
        /// The observer (kept here: one lock and one allocation less per source).
        var callbacks = Callbacks()
        var started = false
        var closed = false
        var lastEventId: String
        var reconnectionTime: Duration
        var readyState: EventSourceState = .connecting
        var lastStatus: Int?
        /// Iterators of ``events`` or ``updates`` alive (copies of one count once): while there
        /// are any, updates go into the buffer.
        var consumers = 0
        var restartRequested = false
        /// A 401 was retried for the headers provider since the stream last opened.
        var unauthorizedRetried = false
        /// The response being read, so that restart() and close() can end it.
        var stream: EventStream?
        /// Body bytes of the responses that ended.
        var bytesOfEndedStreams = 0
        /// The span of the connection being opened, ended when its head is accepted or it fails.
        var connectSpan: (any Span)?
    }

    /// - Parameters:
    ///   - url: an `http` or `https` URL.
    ///   - configuration: headers, method, timing, TLS and limits.
    ///   - runtime: event loops, HTTP client, logger and clock; shared by default.
    public init(url: URL, configuration: EventSourceConfiguration, runtime: RealtimeRuntime = .shared) {
        self.url = url
        self.configuration = configuration
        // Every connection of this source, reconnects included, runs on one event loop (`eventLoop`).
        self.runtime = runtime.pinnedToOneLoop()
        let cap = configuration.maxReconnectionTime
        let factor = configuration.randomizationFactor
        let maxAttempts = configuration.maxReconnectAttempts
        let initial = configuration.reconnectionTime
        let reconnectionTime = NIOLockedValueBox(initial)
        let state = NIOLockedValueBox(LoopState(lastEventId: configuration.lastEventId ?? "", reconnectionTime: initial))
        let policy = ReconnectPolicy(
            backoff: .custom { attempt in
                let base = reconnectionTime.withLockedValue { $0 }
                return BackoffPolicy.exponential(
                    initial: base, maximum: max(cap, base), randomizationFactor: factor, maxAttempts: maxAttempts
                ).delay(forAttempt: attempt)
            },
            reachability: configuration.reachability,
            shouldRetry: Self.retryRule(configuration, state: state))
        self.reconnectionTimeForBackoff = reconnectionTime
        self.state = state
        self.buffer = InboundBuffer(limit: configuration.bufferSize)
        self.metrics = ClientMetrics.shared(protocol: "sse", client: configuration.clientLabel, runtime: runtime)
        self.driver = ReconnectDriver(policy: policy, runtime: runtime)
        driver.report(to: metrics)
    }

    /// ``EventSourceConfiguration/shouldRetry``, except that with a headers provider one 401 in a
    /// row is retried (the next attempt asks the provider again).
    private static func retryRule(
        _ configuration: EventSourceConfiguration, state: NIOLockedValueBox<LoopState>
    ) -> @Sendable (RealtimeError) -> Bool {
        guard configuration.headersProvider != nil else { return configuration.shouldRetry }
        let shouldRetry = configuration.shouldRetry
        return { error in
            if error.code == .badStatus, error.status == .unauthorized {
                let first = state.withLockedValue { state in
                    defer { state.unauthorizedRetried = true }
                    return !state.unauthorizedRetried
                }
                if first { return true }
            }
            return shouldRetry(error)
        }
    }

    /// The reconnection time the backoff starts from (the server's `retry:`), read by the policy.
    let reconnectionTimeForBackoff: NIOLockedValueBox<Duration>

    /// The events, in order. Iterating starts the connection if ``run()`` has not.
    /// One consumer at a time, across ``events`` and ``updates``.
    public var events: EventSourceEvents { EventSourceEvents(source: self) }

    /// Everything the connection says, in order: opens, events, comments (with
    /// ``EventSourceConfiguration/includeComments``) and failures. Ends after ``close()``, a 204, or
    /// a failure that is not retried (its `.failure(_, willRetry: false)` comes first).
    /// One consumer at a time, across ``events`` and ``updates``.
    public var updates: EventSourceUpdates { EventSourceUpdates(source: self) }

    /// How many times the consumer of ``events`` or ``updates`` was handed what arrived (once per
    /// batch a read brought), for tests of the hand-over.
    package var consumerWakeUps: Int { buffer.consumerWakeUps }
    /// Whether a loop waits for the next event now (for tests that pace a server by the reader).
    package var isConsumerWaiting: Bool { buffer.hasWaitingConsumer }

    /// The WHATWG ready state.
    public var readyState: EventSourceState { state.withLockedValue { $0.readyState } }

    /// The connection state with reconnect attempts, current value and changes.
    public var connectionState: StateBroadcaster<ConnectionState> { driver.state }

    /// The last event ID received (sent as `Last-Event-ID` when reconnecting).
    public var lastEventId: String { state.withLockedValue { $0.lastEventId } }

    /// Bytes of event stream received so far, over every connection (the bodies, as they came).
    public var bytesReceived: Int {
        state.withLockedValue { $0.bytesOfEndedStreams + ($0.stream?.bytesReceived ?? 0) }
    }

    /// Whether the open stream's reading is paused because the consumer is `bufferSize` events behind.
    package var isReadingPaused: Bool { state.withLockedValue { $0.stream }?.isPaused ?? false }

    /// The reconnection time, as last set by the server's `retry:` field.
    public var reconnectionTime: Duration { state.withLockedValue { $0.reconnectionTime } }

    /// Runs the connection until ``close()``, a 204, a fatal error, or the service group's graceful
    /// shutdown (which closes the source). When iterating ``events`` already started it, waits for
    /// that connection to end instead. Cancelling the task closes the source too.
    public func run() async throws {
        startIfNeeded()
        do {
            try await cancelWhenGracefulShutdown { try await self.ended.cancellableValue() }
        } catch {
            close()
        }
    }

    /// Closes the connection for good; ``events`` ends normally.
    public func close() {
        let (started, stream) = state.withLockedValue { state -> (Bool, EventStream?) in
            state.closed = true
            state.readyState = .closed
            return (state.started, state.stream)
        }
        // Stopped first: the end of the stream cancelled below is then ignored.
        if started { driver.stop() }
        stream?.cancel()
        buffer.finish()
        ended.complete(.success(()))
    }

    /// Drops the current connection and connects again at once (no backoff), sending the last event
    /// ID: for a reset the server asked for in an event, or a user's "refresh". Starts the
    /// connection if it was not running; does nothing after ``close()``.
    public func restart() {
        enum Step { case nothing, start, cancel(EventStream), now }
        let step = state.withLockedValue { state -> Step in
            if state.closed { return .nothing }
            if !state.started { return .start }
            if let stream = state.stream {
                state.restartRequested = true
                return .cancel(stream)
            }
            return .now
        }
        switch step {
        case .nothing: return
        case .start: startIfNeeded()
        case .cancel(let stream): stream.cancel()
        case .now: driver.restartNow()
        }
    }

    func startIfNeeded() {
        let start = state.withLockedValue { state -> Bool in
            guard !state.started, !state.closed else { return false }
            state.started = true
            return true
        }
        guard start else { return }
        driver.start { [weak self] event in
            guard let self else { return }
            switch event {
            case .connect: self.openConnection()
            case .failed(let error, let willRetry): self.failed(error, willRetry: willRetry)
            case .finished(let error): self.finished(error)
            }
        }
    }

    func attachConsumer() -> Consumer {
        state.withLockedValue { $0.consumers += 1 }
        startIfNeeded()
        return Consumer(source: self)
    }

    /// The last iterator is gone: nothing is buffered for the sequences any more, and a stream
    /// paused for them reads on (callbacks go on being called).
    func detachConsumer() {
        let none = state.withLockedValue { state -> Bool in
            state.consumers -= 1
            return state.consumers == 0
        }
        if none { buffer.discardBuffered() }
    }

    var hasConsumer: Bool { state.withLockedValue { $0.consumers > 0 } }

    /// Updates buffered for the sequences now, not yet taken (for tests).
    package var bufferedUpdates: Int { buffer.bufferedCount }

    /// Hands `updates` to the sequences' consumer, if there is one; returns whether to read on.
    /// On the connection's event loop the consumer is woken once after the current job, so every
    /// body part of one socket read (a chunk per event, as servers write them) is one hand-over.
    func deliver(_ updates: some Collection<EventSourceUpdate>) -> Bool {
        guard hasConsumer, !updates.isEmpty else { return true }
        let goOn = buffer.append(contentsOf: updates)
        // The last iterator may have gone between the check and the yield.
        if !hasConsumer {
            buffer.discardBuffered()
            return true
        }
        return goOn
    }

    /// Held by every iterator of ``events`` and ``updates`` (and its copies): when the last one is
    /// gone, the source stops buffering for them.
    final class Consumer: Sendable {
        let source: EventSource
        init(source: EventSource) { self.source = source }
        deinit { source.detachConsumer() }
    }

    // The driver's callbacks.

    private func openConnection() {
        if state.withLockedValue({ $0.closed }) { return }
        setReadyState(.connecting)
        guard let provider = configuration.headersProvider else { return openStream() }
        // The provider is async and the driver's callback is not: a short task per attempt, only
        // for a source with a provider. close() meanwhile is seen when the stream registers.
        Task {
            do {
                let headers = try await provider()
                openStream(attemptHeaders: headers)
            } catch {
                driver.ended(.dropped(RealtimeError(.authenticationFailed, "the headers provider failed", underlying: error)))
            }
        }
    }

    private func failed(_ error: RealtimeError, willRetry: Bool) {
        runtime.logger.debug("event stream failed", metadata: ["realtime.error_code": "\(error.code)", "realtime.will_retry": "\(willRetry)"])
        setReadyState(willRetry ? .connecting : .closed)
        _ = deliver(CollectionOfOne(.failure(error, willRetry: willRetry)))
    }

    private func finished(_ error: RealtimeError?) {
        setReadyState(.closed)
        let (status, closed) = state.withLockedValue { ($0.lastStatus, $0.closed) }
        notifyComplete(status: status, error: error)
        if let error, !closed { buffer.finish(throwing: error) } else { buffer.finish() }
        ended.complete(.success(()))
    }

    func setReadyState(_ readyState: EventSourceState) {
        state.withLockedValue { if !$0.closed || readyState == .closed { $0.readyState = readyState } }
    }
}

/// What an ``EventSource`` says, in order (``EventSource/updates``).
public enum EventSourceUpdate: Sendable {
    /// Connected: the server answered 200 with `text/event-stream`.
    case open
    /// An event.
    case event(ServerSentEvent)
    /// A comment line (without the colon), with ``EventSourceConfiguration/includeComments``.
    case comment(String)
    /// The connection failed or ended; `willRetry` says whether the client reconnects (after the
    /// reconnection time). Every failure comes once.
    case failure(RealtimeError, willRetry: Bool)
}

/// The events of an ``EventSource``.
public struct EventSourceEvents: AsyncSequence, Sendable {
    /// The type of the sequence's elements.
    public typealias Element = ServerSentEvent
    package let source: EventSource

    /// The sequence's iterator.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let consumer: EventSource.Consumer

        var base: InboundBuffer<EventSourceUpdate>.Iterator

        /// The next element, or `nil` once the sequence has ended.
        public mutating func next() async throws -> ServerSentEvent? {
            try await next(isolation: nil)
        }

        /// The next event, in the caller's isolation (no hop off the caller's actor per event).
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> ServerSentEvent? {
            while let update = try await base.next(isolation: actor) {
                if case .event(let event) = update { return event }
            }
            return nil
        }
    }

    /// Makes an iterator over the sequence.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(consumer: source.attachConsumer(), base: InboundBuffer.Iterator(source.buffer))
    }
}

/// Everything an ``EventSource`` says (``EventSource/updates``).
public struct EventSourceUpdates: AsyncSequence, Sendable {
    /// The type of the sequence's elements.
    public typealias Element = EventSourceUpdate
    let source: EventSource

    /// The sequence's iterator.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let consumer: EventSource.Consumer

        var base: InboundBuffer<EventSourceUpdate>.Iterator

        /// Ends (nil) after the last update; the failure that ended the stream came as an update.
        public mutating func next() async throws -> EventSourceUpdate? {
            try await next(isolation: nil)
        }

        /// The next update, in the caller's isolation.
        public mutating func next(isolation actor: isolated (any Actor)?) async throws -> EventSourceUpdate? {
            do {
                return try await base.next(isolation: actor)
            } catch let error as RealtimeError where error.code != .cancelled {
                return nil
            }
        }
    }

    /// Makes an iterator over the sequence.
    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(consumer: source.attachConsumer(), base: InboundBuffer.Iterator(source.buffer))
    }
}
