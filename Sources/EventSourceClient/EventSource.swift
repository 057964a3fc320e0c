#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif
import NIOConcurrencyHelpers
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
/// Iterating ``events`` starts the connection (or run it as a `Service` with ``run()``). The
/// sequence ends when ``close()`` is called or the server answers 204; it throws a
/// ``RealtimeError`` when the connection fails for good (a status other than 200, a content type
/// other than `text/event-stream`, or the reconnect policy giving up).
public final class EventSource: Service, Sendable {
    public let url: URL
    public let configuration: EventSourceConfiguration
    let runtime: RealtimeRuntime
    let driver: ReconnectDriver<Never>
    let state: NIOLockedValueBox<LoopState>
    let stream: AsyncThrowingStream<ServerSentEvent, any Error>
    let continuation: AsyncThrowingStream<ServerSentEvent, any Error>.Continuation
    /// Callbacks of the IKEventSource-shaped layer (EventSource+IKEventSource.swift).
    let callbacks = NIOLockedValueBox(Callbacks())

    struct LoopState {
        var task: Task<Void, Never>?
        var started = false
        var closed = false
        var lastEventId: String
        var reconnectionTime: Duration
        var readyState: EventSourceState = .connecting
        var lastStatus: Int?
        var reconnects = true
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
        (stream, continuation) = AsyncThrowingStream<ServerSentEvent, any Error>.makeStream()
    }

    /// The events, in order. Iterating starts the connection if ``run()`` has not.
    /// One consumer at a time.
    public var events: EventSourceEvents { EventSourceEvents(source: self) }

    /// The WHATWG ready state.
    public var readyState: EventSourceState { state.withLockedValue { $0.readyState } }

    /// The connection state with reconnect attempts, current value and changes.
    public var connectionState: StateBroadcaster<ConnectionState> { driver.state }

    /// The last event ID received (sent as `Last-Event-ID` when reconnecting).
    public var lastEventId: String { state.withLockedValue { $0.lastEventId } }

    /// The reconnection time, as last set by the server's `retry:` field.
    public var reconnectionTime: Duration { state.withLockedValue { $0.reconnectionTime } }

    /// Runs the connection until ``close()``, a 204, a fatal error, or cancellation.
    public func run() async throws {
        let first = state.withLockedValue { state -> Bool in
            if state.started { return false }
            state.started = true
            return true
        }
        guard first else { throw RealtimeError(.protocolViolation, "this EventSource is already running") }
        await loop()
    }

    /// Closes the connection for good; ``events`` ends normally.
    public func close() {
        let task = state.withLockedValue { state -> Task<Void, Never>? in
            state.closed = true
            state.readyState = .closed
            return state.task
        }
        task?.cancel()
        continuation.finish()
    }

    func startIfNeeded() {
        state.withLockedValue { state in
            guard !state.started, !state.closed else { return }
            state.started = true
            state.task = Task { await self.loop() }
        }
    }

    /// The connection loop: the reconnect driver runs one session per connection.
    func loop() async {
        let error = await driver.run { context in
            if self.state.withLockedValue({ $0.closed }) { return .closed }
            self.setReadyState(.connecting)
            return try await self.session(context)
        }
        setReadyState(.closed)
        let status = state.withLockedValue { $0.lastStatus }
        notifyComplete(status: status, reconnect: error.map { configuration.shouldRetry($0) } ?? false, error: error)
        if let error, !state.withLockedValue({ $0.closed }) {
            continuation.finish(throwing: error)
        } else {
            continuation.finish()
        }
    }

    func setReadyState(_ readyState: EventSourceState) {
        state.withLockedValue { if !$0.closed || readyState == .closed { $0.readyState = readyState } }
    }
}

/// The events of an ``EventSource``.
public struct EventSourceEvents: AsyncSequence, Sendable {
    public typealias Element = ServerSentEvent
    let source: EventSource

    public struct AsyncIterator: AsyncIteratorProtocol {
        let source: EventSource
        var base: AsyncThrowingStream<ServerSentEvent, any Error>.AsyncIterator

        public mutating func next() async throws -> ServerSentEvent? {
            source.startIfNeeded()
            return try await base.next()
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(source: source, base: source.stream.makeAsyncIterator())
    }
}
