import Logging
import NIOConcurrencyHelpers

/// How one connected session ended, as told by the protocol module that ran it.
// The error cases are indirect: a session's end is returned into the frame of the task that waits
// for the session (as large as its largest case, for the connection's life).
public enum SessionEnd: Sendable {
    /// The user closed it: do not reconnect.
    case closed
    /// The connection dropped and should be re-established. `minimumDelay` lets a protocol raise
    /// the wait (an SSE `retry:` field, a server's reconnect hint).
    indirect case dropped(RealtimeError?, minimumDelay: Duration? = nil)
    /// Reconnect at once, without backoff (a reset the user or the server asked for).
    case restart
    /// The connection ended for good with this error: do not reconnect (a server that said not to
    /// come back, a first connection that must not be retried).
    indirect case failed(RealtimeError)
}

/// The reconnect loop every client runs: connection state, backoff, reachability and attempt
/// counting in one place (the rules are ``ReconnectMachine``'s).
///
/// A protocol module calls `run(_:)` with a closure that opens one connection, calls
/// ``SessionContext/connected()`` once its handshake is done, and returns or throws when the
/// connection ends. A client whose connections end in callbacks instead (no task waits while it is
/// connected) drives it with ``start(_:)`` and the inputs ``opened()``, ``ended(_:)``, ``stop()``
/// and ``restartNow()``: the same rules, the retry delay a deadline on the runtime's `TimerQueue`.
/// Outgoing messages do not pass through the driver: each client queues them in its outbox, which
/// outlives the connections.
public final class ReconnectDriver: Sendable {
    /// Handed to each session.
    public struct SessionContext: Sendable {
        let driver: ReconnectDriver
        /// 0 for the first connection, then the reconnect attempt number.
        public let attempt: Int

        /// Marks the session connected (its handshake done); callable from a connection's event loop.
        public func connected() {
            driver.markOpened()
        }

        /// The connection carried a message: it counts as stable (the attempt count resets), however
        /// soon it drops.
        public func progressed() {
            driver.box.withLockedValue { $0.machine.progressed() }
        }
    }

    // One allocation besides the object: a driver lives as long as its client, and an idle event
    // stream is counted in hundreds of bytes.
    fileprivate struct State {
        var machine: ReconnectMachine
        var metrics: ClientMetrics?
        /// Event-driven use (``start(_:)``): what the owner is told, the armed retry deadline and
        /// the reachability wait.
        var handle: (@Sendable (Event) -> Void)?
        /// What the rules wait for now, when driven from callbacks.
        var wait: Wait?
    }

    fileprivate enum Wait {
        case network(Task<Void, Never>)
        case retry(TimerQueue.Timer)
    }

    /// Drops what the rules waited for (a stop or a restart came first).
    private func cancel(_ wait: Wait?) {
        switch wait {
        case .network(let task)?: task.cancel()
        case .retry(let timer)?: runtime.timers.cancel(timer)
        case nil: break
        }
    }

    /// What a client driving the driver from callbacks (``start(_:)``) is told, outside the
    /// driver's lock, in the order the rules produce them.
    public enum Event: Sendable {
        /// Open one connection now (attempt 0: the first, or a restart); report it with
        /// ``ReconnectDriver/opened()`` and its end with ``ReconnectDriver/ended(_:)``.
        case connect(attempt: Int)
        /// A connection failed or dropped; `willRetry` says whether another attempt follows.
        case failed(RealtimeError, willRetry: Bool)
        /// Stopped for good: nil after ``ReconnectDriver/stop()`` or a clean close, else why.
        case finished(RealtimeError?)
    }

    /// The rules the driver follows.
    public var policy: ReconnectPolicy { box.withLockedValue { $0.machine.policy } }
    /// The connection state, current and as a sequence of changes.
    public let state: StateBroadcaster<ConnectionState>
    private let runtime: RealtimeRuntime
    fileprivate let box: NIOLockedValueBox<State>
    /// Attempts, failures, reconnects and open connections, when the client reports metrics.
    package var metrics: ClientMetrics? { box.withLockedValue { $0.metrics } }

    /// Reports this driver's connections to `metrics` (a client's).
    package func report(to metrics: ClientMetrics) { box.withLockedValue { $0.metrics = metrics } }

    /// - Parameters:
    ///   - policy: attempts, backoff and stability rules.
    ///   - runtime: the runtime whose clock and timers the driver uses.
    ///   - random: the jitter source, a number in `0..<1`; fixed in tests.
    public init(
        policy: ReconnectPolicy,
        runtime: RealtimeRuntime = .shared,
        random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }
    ) {
        self.runtime = runtime
        self.state = StateBroadcaster(.disconnected(nil))
        self.box = NIOLockedValueBox(State(machine: ReconnectMachine(policy: policy, random: random)))
    }

    /// Runs sessions until one ends with ``SessionEnd/closed``, the policy gives up, or the task is
    /// cancelled. Returns the error that ended it for good, or nil.
    ///
    /// The rules (attempts, backoff, stability, giving up) are ``ReconnectMachine``'s; this loop
    /// performs its actions: runs a session, waits for reachability, waits the backoff delay as a
    /// deadline on the runtime's `TimerQueue`. `onFailure` is told about every failure once, in
    /// order, with whether the loop will retry.
    @discardableResult
    public func run(
        _ session: @Sendable (SessionContext) async throws -> SessionEnd,
        onFailure: (@Sendable (RealtimeError, _ willRetry: Bool) async -> Void)? = nil
    ) async -> RealtimeError? {
        // The task's frame here lives as long as the client: it keeps only the pending actions and
        // the step at hand. The bookkeeping is in synchronous functions, and each wait in an async
        // function of its own: an async frame keeps room for the locals of every await it holds
        // (the failure being reported, the session's end), and only the session's wait lasts.
        var pending = startRun()
        while true {
            switch nextStep(&pending) {
            case .finished(let error):
                return error
            case .report(let error, let willRetry):
                if let onFailure { await report(error, willRetry: willRetry, to: onFailure) }
            case .connect(let attempt):
                pending += await runSession(session, attempt: attempt)
            case .waitForNetwork:
                await waitForNetwork(&pending)
            case .waitForRetry(let delay):
                await waitForRetry(delay, &pending)
            }
        }
    }

    /// One session, start to end: the machine's next actions.
    @inline(never)
    private func runSession(
        _ session: @Sendable (SessionContext) async throws -> SessionEnd, attempt: Int
    ) async -> [ReconnectMachine.Action] {
        do {
            return sessionEnded(try await session(SessionContext(driver: self, attempt: attempt)))
        } catch {
            return sessionFailed(error)
        }
    }

    @inline(never)
    private func report(
        _ error: RealtimeError, willRetry: Bool, to onFailure: @Sendable (RealtimeError, _ willRetry: Bool) async -> Void
    ) async {
        await onFailure(error, willRetry)
    }

    @inline(never)
    private func sessionFailed(_ error: any Error) -> [ReconnectMachine.Action] {
        sessionEnded(error is CancellationError ? nil : .dropped(RealtimeError.wrap(error)))
    }

    @inline(never)
    private func waitForNetwork(_ pending: inout [ReconnectMachine.Action]) async {
        do {
            try await box.withLockedValue({ $0.machine.policy.reachability }).waitUntilReachable()
            pending += box.withLockedValue { $0.machine.networkReachable() }
        } catch {
            pending = stopNow()
        }
    }

    @inline(never)
    private func waitForRetry(_ delay: Duration, _ pending: inout [ReconnectMachine.Action]) async {
        do {
            try await runtime.timers.wait(for: delay)
            pending += box.withLockedValue { $0.machine.retryDue() }
        } catch {
            pending = stopNow()
        }
    }

    /// What ``run(_:onFailure:)`` awaits next.
    private enum Step {
        // Indirect: the step is kept in the frame of the loop that waits for the session.
        indirect case finished(RealtimeError?)
        indirect case report(RealtimeError, willRetry: Bool)
        case connect(attempt: Int)
        case waitForNetwork
        case waitForRetry(Duration)
    }

    private func startRun() -> [ReconnectMachine.Action] {
        // The machine starts over from idle or stopped (its count of failed attempts reset).
        box.withLockedValue { $0.machine.start() }
    }

    /// Performs the pending actions that need no waiting, up to the first that does.
    private func nextStep(_ pending: inout [ReconnectMachine.Action]) -> Step {
        while !pending.isEmpty {
            switch pending.removeFirst() {
            case .publish(let connectionState):
                state.update(connectionState)
            case .report(let error, let willRetry):
                metrics?.failed(error)
                if willRetry {
                    runtime.logger.debug("connection dropped, reconnecting", metadata: ["realtime.error_code": "\(error.code)"])
                }
                return .report(error, willRetry: willRetry)
            case .finished(let error):
                return .finished(error)
            case .connect(let attempt):
                metrics?.attempt(reconnect: attempt > 0)
                return .connect(attempt: attempt)
            case .waitForNetwork:
                return .waitForNetwork
            case .scheduleRetry(let delay, _):
                return .waitForRetry(delay)
            }
        }
        // The machine always ends with `finished`; an empty list would mean it stopped already.
        return .finished(nil)
    }

    /// A session ended (nil: cancelled, or the task was cancelled): the machine's next actions.
    private func sessionEnded(_ end: SessionEnd?) -> [ReconnectMachine.Action] {
        guard let end, !Task.isCancelled else { return stopNow() }
        return endActions(end)
    }

    /// The machine's actions for a session's end (both ways of driving it); an open connection is
    /// counted closed.
    fileprivate func endActions(_ end: SessionEnd) -> [ReconnectMachine.Action] {
        let now = runtime.timers.now
        return box.withLockedValue { state in
            if state.machine.phase == .connected { state.metrics?.closed() }
            return state.machine.ended(end, now: now)
        }
    }

    /// Stops for good: the machine's actions and the wait to drop (both ways of driving it). A
    /// connection that was open is counted closed here, as at a session's own end.
    fileprivate func stopNow() -> [ReconnectMachine.Action] {
        let (actions, wait) = box.withLockedValue { state in
            if state.machine.phase == .connected { state.metrics?.closed() }
            defer { state.wait = nil }
            return (state.machine.stop(), state.wait)
        }
        cancel(wait)
        return actions
    }

    /// The session reported its connection open (from ``SessionContext``).
    fileprivate func markOpened() {
        let now = runtime.timers.now
        let actions = box.withLockedValue { $0.machine.opened(now: now) }
        if !actions.isEmpty { metrics?.opened() }
        for case .publish(let connectionState) in actions { state.update(connectionState) }
    }
}

extension ReconnectDriver {
    // MARK: Driven from callbacks

    /// Starts connecting, for a client whose connections report their ends in callbacks: no task
    /// waits while a connection is open or while a retry is due (its delay is a deadline on the
    /// runtime's `TimerQueue`; only a reachability wait runs as a short task). Does nothing while
    /// running.
    public func start(_ handle: @escaping @Sendable (Event) -> Void) {
        let actions = box.withLockedValue { state -> [ReconnectMachine.Action] in
            guard state.machine.phase == .idle || state.machine.phase == .stopped else { return [] }
            state.handle = handle
            return state.machine.start()
        }
        perform(actions)
    }

    /// The connection opened (its handshake done); callable from its event loop.
    public func opened() { markOpened() }

    /// The open connection carried a message: it counts as stable.
    public func progressed() { box.withLockedValue { $0.machine.progressed() } }

    /// The connection attempt or the open connection ended.
    public func ended(_ end: SessionEnd) {
        perform(endActions(end))
    }

    /// Stops for good: a pending retry or reachability wait is dropped. The open connection, if
    /// any, is the owner's to close (its end is then ignored).
    public func stop() {
        perform(stopNow())
    }

    /// Connects again at once, without backoff, while waiting to retry (a restart the user asked
    /// for). While a connection is open, end it with ``SessionEnd/restart`` instead.
    public func restartNow() {
        let (actions, wait) = box.withLockedValue { state in
            defer { state.wait = nil }
            return (state.machine.restartNow(), state.wait)
        }
        cancel(wait)
        perform(actions)
    }

    /// The runtime whose timers hold the retry deadline (for tests).
    package var runtimeForTests: RealtimeRuntime { runtime }

    /// The phase the rules are in.
    public var phase: ReconnectMachine.Phase { box.withLockedValue { $0.machine.phase } }

    /// Performs the machine's actions, and those their inputs produce, in order (outside the lock).
    private func perform(_ actions: [ReconnectMachine.Action]) {
        guard !actions.isEmpty, let handle = box.withLockedValue({ $0.handle }) else { return }
        for action in actions {
            switch action {
            case .publish(let connectionState):
                state.update(connectionState)
            case .report(let error, let willRetry):
                metrics?.failed(error)
                handle(.failed(error, willRetry: willRetry))
            case .finished(let error):
                handle(.finished(error))
            case .connect(let attempt):
                metrics?.attempt(reconnect: attempt > 0)
                handle(.connect(attempt: attempt))
            case .waitForNetwork(let attempt):
                // Started under the lock, only while the rules still wait for it: a stop or a
                // restart that came first finds it there and cancels it.
                let reachableNow = box.withLockedValue { state -> [ReconnectMachine.Action] in
                    guard state.machine.phase == .waitingForNetwork(attempt: attempt) else { return [] }
                    let reachability = state.machine.policy.reachability
                    // Nothing to wait for: the retry deadline is armed at once, without a task.
                    if reachability is AlwaysReachable { return state.machine.networkReachable() }
                    // A task only while reconnecting: the reachability check is async.
                    state.wait = .network(Task {
                        do { try await reachability.waitUntilReachable() } catch { return }
                        self.perform(self.box.withLockedValue { state in
                            state.wait = nil
                            return state.machine.networkReachable()
                        })
                    })
                    return []
                }
                perform(reachableNow)
            case .scheduleRetry(let delay, let attempt):
                let timers = runtime.timers
                // Armed under the lock, as above: no deadline outlives the wait it was for.
                box.withLockedValue { state in
                    guard state.machine.phase == .waitingToRetry(attempt: attempt) else { return }
                    state.wait = .retry(timers.schedule(after: delay) { [weak self] in
                        guard let self else { return }
                        self.perform(self.box.withLockedValue { state in
                            state.wait = nil
                            return state.machine.retryDue()
                        })
                    })
                }
            }
        }
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

