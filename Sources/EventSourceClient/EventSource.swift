#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif
import Logging
package import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
public import RealtimeCore
public import ServiceLifecycle

/// A WHATWG EventSource: one Server-Sent Events stream, reconnected with the last event ID.
///
/// ```swift
/// let source = EventSource(url: url, configuration: .init())
/// for try await event in source.events { print(event.type, event.data) }
/// ```
/// Iterating ``events`` (or ``updates``) starts the connection (or run it as a `Service` with
/// ``run()``). ``events`` ends when ``close()`` is called or the server answers 204; it throws a
/// ``RealtimeError`` when the connection fails for good (a status other than 200, a content type
/// other than `text/event-stream`, an event over `maxEventSize`, or the reconnect policy giving up).
/// ``updates`` carries the same events in the same order, with the comments (on request) and a
/// notice for every open and every failure, saying whether it will be retried.
///
/// Memory: events are buffered for the sequence only once an iterator exists, and at most
/// ``EventSourceConfiguration/bufferSize`` of them; while the consumer is that far behind, the
/// client stops reading the connection (the server's writes then wait on TCP), and the idle timeout
/// does not count that time. Callbacks (`onMessage`, `onComment`...) are called before the event is
/// buffered, in order, and never buffer anything.
public final class EventSource: Service, Sendable {
    public let url: URL
    public let configuration: EventSourceConfiguration
    let runtime: RealtimeRuntime
    let driver: ReconnectDriver<Never>
    let state: NIOLockedValueBox<LoopState>
    let buffer: InboundBuffer<EventSourceUpdate>
    /// Callbacks of the IKEventSource-shaped layer (EventSource+IKEventSource.swift).
    package let callbacks = NIOLockedValueBox(Callbacks())

    struct LoopState {
        var task: Task<Void, Never>?
        var started = false
        var closed = false
        var lastEventId: String
        var reconnectionTime: Duration
        var readyState: EventSourceState = .connecting
        var lastStatus: Int?
        /// An iterator of `events` or `updates` exists: produce into the buffer.
        var hasConsumer = false
        var restartRequested = false
        /// The response being read, so that restart() and close() can end it.
        var stream: EventStream?
        /// Body bytes of the responses that ended.
        var bytesOfEndedStreams = 0
    }

    /// - Parameters:
    ///   - url: an `http` or `https` URL.
    ///   - configuration: headers, method, timing, TLS and limits.
    ///   - runtime: event loops, HTTP client, logger and clock; shared by default.
    public init(url: URL, configuration: EventSourceConfiguration, runtime: RealtimeRuntime = .shared) {
        self.url = url
        self.configuration = configuration
        self.runtime = runtime
        self.state = NIOLockedValueBox(LoopState(
            lastEventId: configuration.lastEventId ?? "", reconnectionTime: configuration.reconnectionTime))
        let state = self.state
        let cap = configuration.maxReconnectionTime
        let factor = configuration.randomizationFactor
        let maxAttempts = configuration.maxReconnectAttempts
        self.driver = ReconnectDriver(
            policy: ReconnectPolicy(
                backoff: .custom { attempt in
                    let base = state.withLockedValue { $0.reconnectionTime }
                    return BackoffPolicy.exponential(
                        initial: base, maximum: max(cap, base), randomizationFactor: factor, maxAttempts: maxAttempts
                    ).delay(forAttempt: attempt)
                },
                reachability: configuration.reachability,
                shouldRetry: configuration.shouldRetry),
            queue: OfflineQueue(capacity: 0),
            runtime: runtime)
        self.buffer = InboundBuffer(limit: configuration.bufferSize)
    }

    /// The events, in order. Iterating starts the connection if ``run()`` has not.
    /// One consumer at a time, across ``events`` and ``updates``.
    public var events: EventSourceEvents { EventSourceEvents(source: self) }

    /// Everything the connection says, in order: opens, events, comments (with
    /// ``EventSourceConfiguration/includeComments``) and failures. Ends after ``close()``, a 204, or
    /// a failure that is not retried (its `.failure(_, willRetry: false)` comes first).
    /// One consumer at a time, across ``events`` and ``updates``.
    public var updates: EventSourceUpdates { EventSourceUpdates(source: self) }

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

    /// The reconnection time, as last set by the server's `retry:` field.
    public var reconnectionTime: Duration { state.withLockedValue { $0.reconnectionTime } }

    /// Runs the connection until ``close()``, a 204, a fatal error, cancellation, or the service
    /// group's graceful shutdown (which closes the source). When iterating ``events`` already
    /// started it, waits for that connection to end instead.
    public func run() async throws {
        let (first, running) = state.withLockedValue { state -> (Bool, Task<Void, Never>?) in
            if state.started { return (false, state.task) }
            state.started = true
            return (true, nil)
        }
        await withGracefulShutdownHandler {
            if first {
                await loop()
            } else {
                await running?.value
            }
        } onGracefulShutdown: {
            self.close()
        }
    }

    /// Closes the connection for good; ``events`` ends normally.
    public func close() {
        let (task, stream) = state.withLockedValue { state -> (Task<Void, Never>?, EventStream?) in
            state.closed = true
            state.readyState = .closed
            return (state.task, state.stream)
        }
        stream?.cancel()
        task?.cancel()
        buffer.finish()
    }

    /// Drops the current connection and connects again at once (no backoff), sending the last event
    /// ID: for a reset the server asked for in an event, or a user's "refresh". Starts the
    /// connection if it was not running; does nothing after ``close()``.
    public func restart() {
        let (closed, stream) = state.withLockedValue { state -> (Bool, EventStream?) in
            if state.closed { return (true, nil) }
            state.restartRequested = true
            return (false, state.stream)
        }
        guard !closed else { return }
        stream?.cancel()
        startIfNeeded()
    }

    func startIfNeeded() {
        state.withLockedValue { state in
            guard !state.started, !state.closed else { return }
            state.started = true
            // Unstructured because the app asked for the events without running the source as a
            // Service (`run()` is the structured way); close() cancels it.
            state.task = Task { await self.loop() }
        }
    }

    func attachConsumer() {
        state.withLockedValue { $0.hasConsumer = true }
        startIfNeeded()
    }

    var hasConsumer: Bool { state.withLockedValue { $0.hasConsumer } }

    /// The connection loop: the reconnect driver runs one session per connection.
    func loop() async {
        let error = await driver.run({ context in
            if self.state.withLockedValue({ $0.closed }) { return .closed }
            self.setReadyState(.connecting)
            self.state.withLockedValue { $0.restartRequested = false }
            return try await self.session(context)
        }, onFailure: { error, willRetry in
            self.runtime.logger.debug(
                "event stream failed", metadata: ["realtime.error": "\(error)", "realtime.will_retry": "\(willRetry)"])
            self.setReadyState(willRetry ? .connecting : .closed)
            if self.hasConsumer { self.buffer.yield(.failure(error, willRetry: willRetry)) }
        })
        setReadyState(.closed)
        let status = state.withLockedValue { $0.lastStatus }
        notifyComplete(status: status, error: error)
        if let error, !state.withLockedValue({ $0.closed }) {
            buffer.finish(throwing: error)
        } else {
            buffer.finish()
        }
    }

    func setReadyState(_ readyState: EventSourceState) {
        state.withLockedValue { if !$0.closed || readyState == .closed { $0.readyState = readyState } }
    }
}

/// What an ``EventSource`` says, in order (``EventSource/updates``).
public enum EventSourceUpdate: Sendable {
    /// Connected: the server answered 200 with `text/event-stream`.
    case open
    case event(ServerSentEvent)
    /// A comment line (without the colon), with ``EventSourceConfiguration/includeComments``.
    case comment(String)
    /// The connection failed or ended; `willRetry` says whether the client reconnects (after the
    /// reconnection time). Every failure comes once.
    case failure(RealtimeError, willRetry: Bool)
}

/// The events of an ``EventSource``.
public struct EventSourceEvents: AsyncSequence, Sendable {
    public typealias Element = ServerSentEvent
    package let source: EventSource

    public struct AsyncIterator: AsyncIteratorProtocol {
        let source: EventSource

        var base: InboundBuffer<EventSourceUpdate>.Iterator

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

    public func makeAsyncIterator() -> AsyncIterator {
        source.attachConsumer()
        return AsyncIterator(source: source, base: InboundBuffer.Iterator(source.buffer))
    }
}

/// Everything an ``EventSource`` says (``EventSource/updates``).
public struct EventSourceUpdates: AsyncSequence, Sendable {
    public typealias Element = EventSourceUpdate
    let source: EventSource

    public struct AsyncIterator: AsyncIteratorProtocol {
        let source: EventSource

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

    public func makeAsyncIterator() -> AsyncIterator {
        source.attachConsumer()
        return AsyncIterator(source: source, base: InboundBuffer.Iterator(source.buffer))
    }
}
