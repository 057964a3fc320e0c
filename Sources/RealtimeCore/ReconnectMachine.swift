/// The reconnect rules of every client as a value: when to connect, how long to wait after a
/// failure, when to wait for the network, when to give up, and what state to publish.
///
/// Inputs are `mutating` methods that return the actions their owner performs (``ReconnectDriver``
/// does, for every protocol); times are offsets on the owner's timeline, so the rules are tested
/// without sockets or clocks.
///
/// Attempts are counted across connections that did not prove stable: a connection resets the
/// count only once it stayed open for ``ReconnectPolicy/stableAfter`` or carried a message
/// (``progressed()``). A server that accepts and drops at once is therefore retried the policy's
/// number of times, not forever.
public struct ReconnectMachine: Sendable {
    /// Where the machine is in a connection's life.
    public enum Phase: Sendable, Equatable {
        /// Not started.
        case idle
        /// Connecting, for attempt `attempt` (0: the first connection, or a restart).
        case connecting(attempt: Int)
        /// A connection is open.
        case connected
        /// Waiting until the network is reachable before attempt `attempt`.
        case waitingForNetwork(attempt: Int)
        /// Waiting the backoff delay before attempt `attempt`.
        case waitingToRetry(attempt: Int)
        /// Stopped for good.
        case stopped
    }

    /// What the owner must do after an input.
    public enum Action: Sendable {
        /// Open one connection (`attempt` 0 is a first connection or a restart).
        case connect(attempt: Int)
        /// Ask the reachability check; call ``networkReachable()`` when it says the network is up.
        case waitForNetwork(attempt: Int)
        /// Call ``retryDue()`` once `delay` has passed.
        case scheduleRetry(after: Duration, attempt: Int)
        /// The connection state changed.
        case publish(ConnectionState)
        /// A connection failed or dropped; `willRetry` says whether another attempt follows.
        case report(RealtimeError, willRetry: Bool)
        /// Stopped for good: nil after ``stop()`` or a clean close, else why.
        case finished(RealtimeError?)
    }

    /// The rules the machine follows.
    public let policy: ReconnectPolicy
    private let random: @Sendable () -> Double
    public private(set) var phase: Phase = .idle
    /// Consecutive attempts that did not end in a stable connection.
    public private(set) var failedAttempts = 0
    private var stability = ConnectionStability()
    private var pendingDelay: Duration = .zero
    /// When the drop that began the current run of failed attempts happened.
    private var failingSince: Duration = .zero

    /// Makes an idle machine.
    /// - Parameters:
    ///   - policy: attempts, backoff and stability rules.
    ///   - random: the jitter source, a number in `0..<1`; fixed in tests.
    public init(policy: ReconnectPolicy, random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }) {
        self.policy = policy
        self.random = random
    }

    /// The first connection.
    public mutating func start() -> [Action] {
        guard phase == .idle || phase == .stopped else { return [] }
        failedAttempts = 0
        phase = .connecting(attempt: 0)
        return [.publish(.connecting), .connect(attempt: 0)]
    }

    /// The connection is open (its handshake done).
    public mutating func opened(now: Duration) -> [Action] {
        guard case .connecting = phase else { return [] }
        phase = .connected
        stability.opened(now: now)
        return [.publish(.connected)]
    }

    /// The open connection carried a message: it counts as stable from now.
    public mutating func progressed() {
        if phase == .connected { stability.progressed() }
    }

    /// The connection attempt or the open connection ended.
    public mutating func ended(_ end: SessionEnd, now: Duration) -> [Action] {
        switch phase {
        case .connecting, .connected: break
        case .idle, .waitingForNetwork, .waitingToRetry, .stopped: return []
        }
        if stability.ended(now: now, stableAfter: policy.stableAfter) { failedAttempts = 0 }
        switch end {
        case .closed:
            phase = .stopped
            return [.publish(.disconnected(nil)), .finished(nil)]
        case .failed(let error):
            return endForGood(error)
        case .restart:
            failedAttempts = 0
            phase = .connecting(attempt: 0)
            return [.publish(.reconnecting(attempt: 0)), .connect(attempt: 0)]
        case .dropped(let error, let minimumDelay):
            if let error, !policy.shouldRetry(error) { return endForGood(error) }
            if failedAttempts == 0 { failingSince = now }
            failedAttempts += 1
            let attempt = BackoffPolicy.Attempt(number: failedAttempts, elapsed: now - failingSince, reason: error)
            guard var delay = policy.backoff.delay(for: attempt, random: random()) else {
                let reason = error.map { ": \($0.detail)" } ?? ""
                let gaveUp = RealtimeError(
                    .reconnectGaveUp, "gave up after \(failedAttempts - 1) reconnect attempts\(reason)", underlying: error)
                phase = .stopped
                var actions: [Action] = []
                if let error { actions.append(.report(error, willRetry: false)) }
                return actions + [.publish(.disconnected(gaveUp)), .finished(gaveUp)]
            }
            if let minimumDelay, minimumDelay > delay { delay = minimumDelay }
            pendingDelay = delay
            phase = .waitingForNetwork(attempt: failedAttempts)
            var actions: [Action] = []
            if let error { actions.append(.report(error, willRetry: true)) }
            return actions + [.publish(.reconnecting(attempt: failedAttempts)), .waitForNetwork(attempt: failedAttempts)]
        }
    }

    private mutating func endForGood(_ error: RealtimeError) -> [Action] {
        phase = .stopped
        return [.report(error, willRetry: false), .publish(.disconnected(error)), .finished(error)]
    }

    /// The reachability check said the network is up.
    public mutating func networkReachable() -> [Action] {
        guard case .waitingForNetwork(let attempt) = phase else { return [] }
        phase = .waitingToRetry(attempt: attempt)
        return [.scheduleRetry(after: pendingDelay, attempt: attempt)]
    }

    /// The backoff delay passed.
    public mutating func retryDue() -> [Action] {
        guard case .waitingToRetry(let attempt) = phase else { return [] }
        phase = .connecting(attempt: attempt)
        return [.connect(attempt: attempt)]
    }

    /// Connect again at once, without backoff, from wherever the machine is but stopped (a restart
    /// asked for while waiting to retry). While connecting or connected, end the connection with
    /// ``SessionEnd/restart`` instead.
    public mutating func restartNow() -> [Action] {
        switch phase {
        case .idle, .waitingForNetwork, .waitingToRetry:
            failedAttempts = 0
            phase = .connecting(attempt: 0)
            return [.publish(.reconnecting(attempt: 0)), .connect(attempt: 0)]
        case .connecting, .connected, .stopped:
            return []
        }
    }

    /// The owner stops: no more attempts.
    public mutating func stop() -> [Action] {
        guard phase != .stopped else { return [] }
        phase = .stopped
        return [.publish(.disconnected(nil)), .finished(nil)]
    }
}

/// The rule by which every client counts reconnect attempts: a connection proves stable once it
/// stayed open `stableAfter` or carried a message, and only a stable connection resets the count.
/// One that drops sooner counts as a failed attempt, so a server that accepts and drops at once is
/// retried the policy's number of times, not forever. ``ReconnectMachine`` keeps one, so every
/// client (each runs ``ReconnectDriver``) counts by it.
public struct ConnectionStability: Sendable, Equatable {
    private var openedAt: Duration?
    private var carried = false

    /// No connection open.
    public init() {}

    /// A connection opened at `now` (its handshake done).
    public mutating func opened(now: Duration) {
        openedAt = now
        carried = false
    }

    /// The open connection carried a message.
    public mutating func progressed() {
        if openedAt != nil { carried = true }
    }

    /// The open connection ended at `now`: whether it proved stable. False when none was open.
    public mutating func ended(now: Duration, stableAfter: Duration) -> Bool {
        defer {
            openedAt = nil
            carried = false
        }
        guard let openedAt else { return false }
        return carried || now - openedAt >= stableAfter
    }
}
