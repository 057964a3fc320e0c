import RealtimeCore

/// The lifecycle of a hub connection as a value: each input is a `mutating func` that returns the
/// actions its owner (``HubConnection``) performs. No sockets, no tasks, no clock: times are
/// offsets on the runtime's timer queue (the deadlines it returns are armed there), so the rules
/// are tested directly (HubConnectionStateMachineTests).
///
/// States: disconnected → connecting → connected ⇄ reconnecting → disconnected. A failed first
/// start does not reconnect (as in the reference clients); a drop after being connected does,
/// when a retry policy is set and the server's Close message allowed it.
///
/// Attempts are counted by RealtimeCore's ``ConnectionStability`` rule, like every client's: a
/// reconnected connection that drops before it carried a message or stayed open
/// ``Timing/stableAfter`` continues the reconnect it came from (the retry policy sees the attempts
/// and the time so far), so a server that accepts and drops at once is retried the policy's number
/// of times, not forever.
struct HubConnectionStateMachine {
    enum State: Equatable {
        case disconnected
        case connecting
        case connected
        /// Waiting for or running reconnect attempt `attempt` (1-based).
        case reconnecting(attempt: Int)
        case stopping
    }

    enum Action {
        /// Open a transport (negotiate, connect, handshake). `attempt` is 0 for `start()`.
        case connect(attempt: Int)
        /// Wait `delay`, then open a transport for reconnect attempt `attempt`.
        case reconnect(after: Duration, attempt: Int)
        /// Fail every pending invocation and stream with this error.
        case failPending(RealtimeError)
        case notifyReconnecting(RealtimeError)
        case notifyReconnected
        /// The connection is closed for good (nil: stopped by the app).
        case notifyClosed(RealtimeError?)
        /// Send a Ping: nothing was sent for the keep-alive interval.
        case sendPing
        /// Close the transport with this error: nothing was received for the server timeout.
        case abortTransport(RealtimeError)
        /// Close the transport cleanly (stop).
        case closeTransport
    }

    struct Timing {
        var keepAliveInterval: Duration = .seconds(15)
        var serverTimeout: Duration = .seconds(30)
        /// A connection open this long (or one that carried a message) ends the reconnect that
        /// opened it; one that drops sooner continues it.
        var stableAfter: Duration = .seconds(5)
    }

    /// A reconnect under way or just succeeded: its attempts so far, when it began and why.
    private struct Episode {
        var attempts: Int
        var started: Duration
        var reason: RealtimeError
    }

    /// What a retry policy is asked.
    struct RetryQuestion {
        var previousRetryCount: Int
        var elapsed: Duration
        var reason: RealtimeError
    }

    private(set) var state: State = .disconnected
    let timing: Timing
    /// Nil: no automatic reconnect.
    let retryDelay: (@Sendable (RetryQuestion) -> Duration?)?
    private var lastSent: Duration = .zero
    private var lastReceived: Duration = .zero
    private var reconnectStarted: Duration = .zero
    private var stability = ConnectionStability()
    /// The reconnect that opened the current connection, until that connection proves stable.
    private var episode: Episode?
    /// The owner stopped reading because a consumer (a stream, the handlers) is behind: silence
    /// from the server is then ours, not the server's, and does not count toward the timeout.
    private var readingPaused = false
    private var reconnectReason: RealtimeError?

    init(timing: Timing = Timing(), retryDelay: (@Sendable (RetryQuestion) -> Duration?)?) {
        self.timing = timing
        self.retryDelay = retryDelay
    }

    // MARK: Inputs

    /// The app calls `start()`.
    mutating func start() throws(RealtimeError) -> [Action] {
        guard state == .disconnected else {
            throw RealtimeError(.refused, "start() was called while the connection is \(state); only a disconnected connection can start")
        }
        state = .connecting
        episode = nil
        return [.connect(attempt: 0)]
    }

    /// A transport is open and the handshake accepted.
    mutating func connected(now: Duration) -> [Action] {
        lastSent = now
        lastReceived = now
        switch state {
        case .connecting:
            state = .connected
            stability.opened(now: now)
            return []
        case .reconnecting(let attempt):
            state = .connected
            stability.opened(now: now)
            if let reconnectReason { episode = Episode(attempts: attempt, started: reconnectStarted, reason: reconnectReason) }
            reconnectReason = nil
            return [.notifyReconnected]
        case .stopping, .disconnected, .connected:
            // stop() won the race: the owner closes what it just opened.
            return [.closeTransport]
        }
    }

    /// Opening a transport failed (negotiate, connect or handshake).
    mutating func connectFailed(_ error: RealtimeError, now: Duration) -> [Action] {
        switch state {
        case .connecting:
            // start() throws the error; onClosed is not called for a start that never connected
            // (as in the reference clients).
            state = .disconnected
            return []
        case .reconnecting(let attempt):
            return nextAttempt(after: attempt, reason: error, now: now)
        case .stopping:
            state = .disconnected
            return []
        case .disconnected, .connected:
            return []
        }
    }

    /// The open transport ended. `allowReconnect` is false after a Close message without it.
    mutating func transportClosed(_ error: RealtimeError?, allowReconnect: Bool, now: Duration) -> [Action] {
        switch state {
        case .connected:
            let reason = error ?? RealtimeError(.connectionClosed, "the server closed the connection")
            let pendingError = reason.code == .connectionClosed
                ? reason : RealtimeError(.connectionClosed, "the connection was lost: \(reason.detail)", underlying: reason)
            var actions: [Action] = [.failPending(pendingError)]
            let stable = stability.ended(now: now, stableAfter: timing.stableAfter)
            if stable { episode = nil }
            if allowReconnect, retryDelay != nil, error != nil {
                // An unstable connection continues the reconnect that opened it.
                let previous = episode ?? Episode(attempts: 0, started: now, reason: reason)
                episode = nil
                reconnectStarted = previous.started
                reconnectReason = previous.reason
                state = .reconnecting(attempt: previous.attempts)
                actions.append(.notifyReconnecting(reason))
                actions += nextAttempt(after: previous.attempts, reason: reason, now: now)
            } else {
                state = .disconnected
                actions.append(.notifyClosed(error))
            }
            return actions
        case .stopping:
            state = .disconnected
            return [.failPending(RealtimeError(.cancelled, "the connection was stopped")), .notifyClosed(nil)]
        case .disconnected, .connecting, .reconnecting:
            return []
        }
    }

    /// The app calls `stop()`.
    mutating func stop() -> [Action] {
        switch state {
        case .connected:
            state = .stopping
            return [.closeTransport]
        case .connecting:
            state = .stopping
            return [.closeTransport]
        case .reconnecting:
            state = .disconnected
            return [.failPending(RealtimeError(.cancelled, "the connection was stopped")), .notifyClosed(nil)]
        case .disconnected, .stopping:
            return []
        }
    }

    /// A message was written to the transport.
    mutating func didSend(now: Duration) { lastSent = now }

    /// Bytes arrived from the server (any message counts, Pings included).
    mutating func didReceive(now: Duration) { lastReceived = now }

    /// The open connection carried a message other than a Ping or a Close: it proved stable.
    mutating func progressed() {
        guard state == .connected else { return }
        stability.progressed()
        episode = nil
    }

    /// Reading waits for a slow consumer (`true`) or goes on (`false`, counted as activity).
    mutating func readingPaused(_ paused: Bool, now: Duration) {
        readingPaused = paused
        if !paused { lastReceived = now }
    }

    /// When the owner's timer should next call ``timerFired(now:)``, nil when not connected.
    var nextDeadline: Duration? {
        guard state == .connected else { return nil }
        return min(lastSent + timing.keepAliveInterval, lastReceived + timing.serverTimeout)
    }

    mutating func timerFired(now: Duration) -> [Action] {
        guard state == .connected else { return [] }
        if readingPaused { lastReceived = now }
        if now >= lastReceived + timing.serverTimeout {
            return [.abortTransport(RealtimeError(
                .timeout, "the server sent nothing for \(timing.serverTimeout) (serverTimeout); the connection is considered lost"))]
        }
        if now >= lastSent + timing.keepAliveInterval {
            lastSent = now
            return [.sendPing]
        }
        return []
    }

    private mutating func nextAttempt(after attempt: Int, reason: RealtimeError, now: Duration) -> [Action] {
        let question = RetryQuestion(previousRetryCount: attempt, elapsed: now - reconnectStarted, reason: reason)
        guard let delay = retryDelay?(question) else {
            state = .disconnected
            let original = reconnectReason ?? reason
            return [.notifyClosed(RealtimeError(
                .reconnectGaveUp, "reconnecting gave up after \(attempt) attempt(s); the connection was lost because: \(original.detail)",
                underlying: reason))]
        }
        state = .reconnecting(attempt: attempt + 1)
        return [.reconnect(after: delay, attempt: attempt + 1)]
    }
}
