import RealtimeCore

/// The lifecycle of a hub connection as a value: each input is a `mutating func` that returns the
/// actions its owner (``HubConnection``) performs. No sockets, no tasks, no clock: times are
/// offsets on the runtime's timer queue (the deadlines it returns are armed there), so the rules
/// are tested directly (HubConnectionStateMachineTests).
///
/// States: disconnected → connecting → connected ⇄ reconnecting → disconnected. A failed first
/// start does not reconnect (as in the reference clients); a drop after being connected does,
/// when a retry policy is set and the server's Close message allowed it. With stateful reconnect a
/// lost WebSocket first goes connected → resuming → connected: the same connection on a new socket,
/// calls still accepted (they wait in the outbox), no keep-alive while no socket is open; when the
/// resume gives up, the loss is handled as a drop from connected.
///
/// When and how often to reconnect is not decided here: the connection's ``ReconnectDriver`` (the
/// one every client runs) counts the attempts, asks the retry policy (``HubConnection/reconnectPolicy(_:)``),
/// arms the delays and gives up. This machine tells it each connection's end (``Action/endSession(_:)``)
/// and is told when an attempt is due (``reconnectDue(attempt:)``) and when the driver gave up
/// (``reconnectEnded(_:)``); what the app sees (`onReconnecting`, `onReconnected`, `onClosed`,
/// pending calls failing) and the keep-alive are SignalR's, and stay here.
///
/// The machine also owns the calls waiting for the server (invocations and streams, by invocation
/// id; `Call` is what the owner completes them through) and when `stop()` may return: after the
/// transport's end, and every end being handled, has been performed.
struct HubConnectionStateMachine<Call> {
    enum State: Equatable {
        case disconnected
        case connecting
        case connected
        /// Reconnecting: waiting for an attempt, or running attempt `attempt` (1-based; 0 until the
        /// driver says the first is due).
        case reconnecting(attempt: Int)
        /// Stateful reconnect: the WebSocket was lost and the same connection is being resumed on
        /// a new one (its attempts are the stateful reconnect driver's).
        case resuming
        case stopping
    }

    enum Action {
        /// Open a transport (negotiate, connect, handshake). `attempt` is 0 for `start()`.
        case connect(attempt: Int)
        /// Fail these pending invocations and streams with this error.
        case failPending([Call], RealtimeError)
        case notifyReconnecting(RealtimeError)
        case notifyReconnected
        /// The connection is closed for good (nil: stopped by the app).
        case notifyClosed(RealtimeError?)
        /// Tell the reconnect driver that the connection is open.
        case reportOpened
        /// Tell the reconnect driver how the connection, or an attempt to open one, ended.
        case endSession(SessionEnd)
        /// Stop the reconnect driver (the app stopped): no attempt follows.
        case stopReconnecting
        /// Stop the stateful reconnect driver and end its attempt under way (the app stopped
        /// while the connection was resuming): no socket is re-attached.
        case stopResuming
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
    }

    private(set) var state: State = .disconnected
    let timing: Timing
    /// Whether a drop reconnects (a retry policy is set).
    let reconnects: Bool
    private var lastSent: Duration = .zero
    private var lastReceived: Duration = .zero
    /// The owner stopped reading because a consumer (a stream, the handlers) is behind: silence
    /// from the server is then ours, not the server's, and does not count toward the timeout.
    private var readingPaused = false
    /// The calls waiting for the server's completion, by invocation id.
    private var pending: [String: Call] = [:]
    private var nextInvocationId = 1
    /// Transport ends and failed connects whose actions the owner is performing.
    private var endsBeingHandled = 0

    init(timing: Timing = Timing(), reconnects: Bool) {
        self.timing = timing
        self.reconnects = reconnects
    }

    // MARK: Inputs

    /// The app calls `start()`.
    mutating func start() throws(RealtimeError) -> [Action] {
        guard state == .disconnected else {
            throw RealtimeError(.refused, "start() was called while the connection is \(state); only a disconnected connection can start")
        }
        state = .connecting
        return [.connect(attempt: 0)]
    }

    /// A transport is open and the handshake accepted.
    mutating func connected(now: Duration) -> [Action] {
        lastSent = now
        lastReceived = now
        switch state {
        case .connecting:
            state = .connected
            return [.reportOpened]
        case .reconnecting:
            state = .connected
            return [.reportOpened, .notifyReconnected]
        case .stopping, .disconnected, .connected, .resuming:
            // stop() won the race: the owner closes what it just opened (a resume's socket comes
            // through resumed(now:), not here).
            return [.closeTransport]
        }
    }

    /// Opening a transport failed (negotiate, connect or handshake). The owner performs the
    /// actions, then says ``endHandled()``.
    mutating func connectFailed(_ error: RealtimeError, now: Duration) -> [Action] {
        endsBeingHandled += 1
        switch state {
        case .connecting:
            // start() throws the error; onClosed is not called for a start that never connected
            // (as in the reference clients), and the driver does not retry it.
            state = .disconnected
            return [.endSession(.failed(error))]
        case .reconnecting:
            return [.endSession(.dropped(error))]
        case .stopping:
            state = .disconnected
            return [.stopReconnecting]
        case .disconnected, .connected, .resuming:
            return []
        }
    }

    /// The open WebSocket of a stateful connection was lost (not by a Close message, not by
    /// `stop()`): true when the connection resumes on a new socket; false when it is not connected
    /// (a stop came first), and the loss is then a transport's end.
    mutating func resumeBegan() -> Bool {
        guard state == .connected else { return false }
        state = .resuming
        return true
    }

    /// A new socket took the connection over (stateful reconnect). A stop that came first: the
    /// owner closes what it just opened.
    mutating func resumed(now: Duration) -> [Action] {
        guard state == .resuming else { return [.closeTransport] }
        state = .connected
        lastSent = now
        lastReceived = now
        return []
    }

    /// Whether invocations, sends and streams are accepted (while resuming they wait in the outbox
    /// for the new socket).
    var acceptsCalls: Bool { state == .connected || state == .resuming }

    /// The open transport ended, or a stateful resume gave up. `allowReconnect` is false after a
    /// Close message without it.
    mutating func transportClosed(_ error: RealtimeError?, allowReconnect: Bool, now: Duration) -> [Action] {
        endsBeingHandled += 1
        switch state {
        case .connected, .resuming:
            let reason = error ?? RealtimeError(.connectionClosed, "the server closed the connection")
            let pendingError = reason.code == .connectionClosed
                ? reason : RealtimeError(.connectionClosed, "the connection was lost: \(reason.detail)", underlying: reason)
            if allowReconnect, reconnects, let error {
                state = .reconnecting(attempt: 0)
                // onReconnecting runs before the driver may start the first attempt.
                return [.failPending(takePending(), pendingError), .notifyReconnecting(reason), .endSession(.dropped(error))]
            }
            state = .disconnected
            return [.failPending(takePending(), pendingError), .endSession(error.map { .failed($0) } ?? .closed), .notifyClosed(error)]
        case .stopping:
            state = .disconnected
            return [.failPending(takePending(), RealtimeError(.cancelled, "the connection was stopped")), .stopReconnecting, .notifyClosed(nil)]
        case .disconnected, .connecting, .reconnecting:
            return []
        }
    }

    /// The reconnect driver says attempt `attempt` is due (its delay passed).
    mutating func reconnectDue(attempt: Int) -> [Action] {
        guard case .reconnecting = state else { return [] }
        state = .reconnecting(attempt: attempt)
        return [.connect(attempt: attempt)]
    }

    /// The reconnect driver gave up (the retry policy said no more, or the error is not retried).
    mutating func reconnectEnded(_ error: RealtimeError?) -> [Action] {
        guard case .reconnecting = state else { return [] }
        state = .disconnected
        return [.notifyClosed(error)]
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
            return [.failPending(takePending(), RealtimeError(.cancelled, "the connection was stopped")), .stopReconnecting, .notifyClosed(nil)]
        case .resuming:
            // No socket is open: the connection ends here, its resume with it.
            state = .disconnected
            return [.failPending(takePending(), RealtimeError(.cancelled, "the connection was stopped")), .stopResuming, .stopReconnecting, .notifyClosed(nil)]
        case .disconnected, .stopping:
            return []
        }
    }

    // MARK: Pending calls

    /// A new invocation id, for a call made now: throws `notConnected` unless calls are accepted.
    mutating func reserveInvocation() throws(RealtimeError) -> String {
        guard acceptsCalls else {
            throw RealtimeError(.notConnected, "cannot send data while the connection is \(state); wait for start() or a reconnect")
        }
        return nextId()
    }

    /// The next id of the connection's sequence (invocation ids, and an upload stream's ids).
    mutating func nextId() -> String {
        defer { nextInvocationId += 1 }
        return String(nextInvocationId)
    }

    /// The call `id` waits for the server's completion (its items, for a stream).
    mutating func callStarted(_ id: String, _ call: Call) { pending[id] = call }

    /// The pending call `id` (a stream's items go to it), nil when it is not pending.
    func pendingCall(_ id: String) -> Call? { pending[id] }

    /// The call `id` completed, failed or was cancelled: it is no longer pending (nil when it was
    /// not, for example already failed by a drop).
    mutating func callEnded(_ id: String) -> Call? { pending.removeValue(forKey: id) }

    /// How many calls wait for the server.
    var pendingCount: Int { pending.count }

    private mutating func takePending() -> [Call] {
        defer { pending = [:] }
        return Array(pending.values)
    }

    // MARK: Ends and stop()

    /// The owner performed the actions of a transport's end or a failed connect: true when the
    /// `stop()` calls waiting may return now.
    mutating func endHandled() -> Bool {
        endsBeingHandled -= 1
        return stopMayReturn
    }

    /// Whether a `stop()` may return: the machine left `stopping` and no end is being handled (so
    /// no callback of the connection runs after it returned).
    var stopMayReturn: Bool { state != .stopping && endsBeingHandled == 0 }

    /// Whether the connection is closed for good, its end handled (what ``HubConnection/waitUntilClosed()`` waits for).
    var isClosed: Bool { state == .disconnected && endsBeingHandled == 0 }

    /// A message was written to the transport.
    mutating func didSend(now: Duration) { lastSent = now }

    /// Bytes arrived from the server (any message counts, Pings included).
    mutating func didReceive(now: Duration) { lastReceived = now }

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
                .timeout, "the server sent nothing for \(timing.serverTimeout) (serverTimeout); the connection is considered lost",
                stage: .established))]
        }
        if now >= lastSent + timing.keepAliveInterval {
            lastSent = now
            return [.sendPing]
        }
        return []
    }
}

extension HubConnectionStateMachine: Sendable where Call: Sendable {}

extension HubConnectionStateMachine.Action: Sendable where Call: Sendable {}
