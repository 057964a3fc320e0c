import Logging
import NIOConcurrencyHelpers

/// How one connected session ended, as told by the protocol module that ran it.
public enum SessionEnd: Sendable {
    /// The user closed it: do not reconnect.
    case closed
    /// The connection dropped and should be re-established. `minimumDelay` lets a protocol raise
    /// the wait (an SSE `retry:` field, a server's reconnect hint).
    case dropped(RealtimeError?, minimumDelay: Duration? = nil)
    /// Reconnect at once, without backoff (a reset the user or the server asked for).
    case restart
}

/// The reusable reconnect loop every client runs: connection state, backoff, reachability and the
/// offline send queue in one place.
///
/// A protocol module calls ``run(_:)`` with a closure that opens one connection, calls
/// ``SessionContext/connected(sender:)`` once its handshake is done, and returns or throws when the
/// connection ends. Messages given to ``send(_:)`` go straight to the live connection, or into the
/// offline queue while there is none; the queue is flushed in order on the next `connected`.
public final class ReconnectDriver<Outbound: Sendable>: Sendable {
    public typealias Sender = @Sendable (Outbound) async throws -> Void

    /// Handed to each session.
    public struct SessionContext: Sendable {
        let driver: ReconnectDriver<Outbound>
        /// 0 for the first connection, then the reconnect attempt number.
        public let attempt: Int

        /// Marks the session connected: flushes the offline queue in order through `sender`, then
        /// routes later sends straight to it.
        public func connected(sender: @escaping Sender) async throws {
            try await driver.becameConnected(sender: sender)
        }
    }

    fileprivate struct State {
        var queue: OfflineQueue<Outbound>
        var sender: Sender?
        var stopped = false
    }

    public let policy: ReconnectPolicy
    /// The connection state, current and as a sequence of changes.
    public let state: StateBroadcaster<ConnectionState>
    private let runtime: RealtimeRuntime
    private let onDrop: @Sendable (Outbound) -> Void
    fileprivate let box: NIOLockedValueBox<State>
    private let random: @Sendable () -> Double

    /// - Parameters:
    ///   - onOverflowDrop: told about every element the queue drops under ``OverflowPolicy/dropOldest``.
    ///   - random: the jitter source, a number in `0..<1`; fixed in tests.
    public init(
        policy: ReconnectPolicy,
        queue: OfflineQueue<Outbound> = OfflineQueue(),
        runtime: RealtimeRuntime = .shared,
        onOverflowDrop: @escaping @Sendable (Outbound) -> Void = { _ in },
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }
    ) {
        self.policy = policy
        self.runtime = runtime
        self.onDrop = onOverflowDrop
        self.random = random
        self.state = StateBroadcaster(.disconnected(nil))
        self.box = NIOLockedValueBox(State(queue: queue))
    }

    /// Messages still waiting in the offline queue, oldest first.
    public var queuedCount: Int { box.withLockedValue { $0.queue.count } }

    /// Removes and returns what is still queued (after the driver stopped, so nothing is lost).
    public func drainQueue() -> [Outbound] { box.withLockedValue { $0.queue.drain() } }

    /// Sends on the live connection, or queues while there is none.
    ///
    /// Throws ``RealtimeError/Code/queueFull`` when the queue is full and rejects, and
    /// ``RealtimeError/Code/notConnected`` once the driver has stopped for good.
    public func send(_ message: Outbound) async throws {
        let route = box.withLockedValue { state -> SendRoute in
            if state.stopped { return .stopped }
            if let sender = state.sender { return .live(sender) }
            switch state.queue.enqueue(message) {
            case .enqueued: return .queued
            case .rejected(let element): return .rejected(element)
            case .droppedOldest(let element): return .dropped(element)
            }
        }
        switch route {
        case .live(let sender):
            do {
                try await sender(message)
            } catch {
                // The connection died under us: keep the message for the next connection.
                let result = box.withLockedValue { state -> OfflineQueue<Outbound>.EnqueueResult in
                    state.sender = nil
                    return state.queue.enqueue(message)
                }
                if case .droppedOldest(let element) = result { onDrop(element) }
                if case .rejected = result { throw RealtimeError.queueFull(capacity: box.withLockedValue { $0.queue.capacity }) }
            }
        case .queued:
            runtime.logger.trace("queued message while offline")
        case .rejected:
            throw RealtimeError.queueFull(capacity: box.withLockedValue { $0.queue.capacity })
        case .dropped(let element):
            onDrop(element)
        case .stopped:
            throw RealtimeError(.notConnected, "the connection is closed and will not reconnect")
        }
    }

    fileprivate func becameConnected(sender: @escaping Sender) async throws {
        while true {
            let next = box.withLockedValue { state -> Outbound? in
                if let element = state.queue.dequeue() { return element }
                state.sender = sender
                return nil
            }
            guard let next else { break }
            do {
                try await sender(next)
            } catch {
                box.withLockedValue { $0.queue.requeueFront(next) }
                throw error
            }
        }
        state.update(.connected)
    }

    /// Runs sessions until one ends with ``SessionEnd/closed``, the policy gives up, or the task is
    /// cancelled. Returns the error that ended it for good, or nil.
    @discardableResult
    ///
    /// `onFailure` is told about every failure once, in order, with whether the loop will retry
    /// (the policy's `shouldRetry` and backoff are consulted once per failure).
    public func run(
        _ session: @Sendable (SessionContext) async throws -> SessionEnd,
        onFailure: (@Sendable (RealtimeError, _ willRetry: Bool) async -> Void)? = nil
    ) async -> RealtimeError? {
        box.withLockedValue { $0.stopped = false }
        var attempt = 0
        state.update(.connecting)
        var finalError: RealtimeError?
        loop: while true {
            let end: SessionEnd
            do {
                end = try await session(SessionContext(driver: self, attempt: attempt))
            } catch is CancellationError {
                break loop
            } catch {
                end = .dropped(RealtimeError.wrap(error))
            }
            let wasConnected = box.withLockedValue { state -> Bool in
                defer { state.sender = nil }
                return state.sender != nil
            }
            if Task.isCancelled { break loop }
            if case .restart = end {
                attempt = 0
                state.update(.reconnecting(attempt: 0))
                continue loop
            }
            guard case .dropped(let error, let minimumDelay) = end else { break loop }
            if wasConnected || state.current.isConnected { attempt = 0 }
            if let error, !policy.shouldRetry(error) {
                await onFailure?(error, false)
                finalError = error
                break loop
            }
            attempt += 1
            guard var delay = policy.backoff.delay(forAttempt: attempt, random: random()) else {
                if let error { await onFailure?(error, false) }
                finalError = RealtimeError(
                    .reconnectGaveUp, "gave up after \(attempt - 1) reconnect attempts",
                    underlying: error)
                break loop
            }
            if let error { await onFailure?(error, true) }
            if let minimumDelay, minimumDelay > delay { delay = minimumDelay }
            state.update(.reconnecting(attempt: attempt))
            runtime.logger.debug(
                "connection dropped, reconnecting",
                metadata: ["realtime.attempt": "\(attempt)", "realtime.delay": "\(delay)"])
            do {
                try await policy.reachability.waitUntilReachable()
                try await runtime.sleep(for: delay)
            } catch {
                break loop
            }
        }
        box.withLockedValue {
            $0.stopped = true
            $0.sender = nil
        }
        state.update(.disconnected(finalError))
        return finalError
    }
}

extension ReconnectDriver.SessionContext where Outbound == Never {
    /// Marks the session connected, for a client that sends nothing (an event stream): callable
    /// from a connection's event loop.
    public func connected() {
        driver.box.withLockedValue { $0.sender = { _ in } }
        driver.state.update(.connected)
    }
}

extension ReconnectDriver {
    fileprivate enum SendRoute {
        case live(Sender)
        case queued
        case rejected(Outbound)
        case dropped(Outbound)
        case stopped
    }
}

extension RealtimeError {
    /// Turns any error into a `RealtimeError`, keeping it as the underlying cause.
    package static func wrap(_ error: any Error) -> RealtimeError {
        if let error = error as? RealtimeError { return error }
        if error is CancellationError { return RealtimeError(.cancelled, "cancelled", underlying: CancellationError()) }
        return RealtimeError(.connectionClosed, "the connection failed", underlying: error)
    }
}

