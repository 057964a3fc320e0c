import RealtimeCore

/// The lifecycle of one Engine.IO session as a value: each input is a `mutating func` that returns
/// what its owner (``EngineIOSession``) does next. No sockets, no tasks, no clock: times are
/// offsets on the runtime's timer queue, and the waiters it hands back are the owner's
/// continuations (plain values in the tests, `EngineIOSessionMachineTests`).
///
/// Phases: opening → polling → probing → upgrading → websocket, or opening → websocket when the
/// session starts on the WebSocket; any phase → closed. A failed probe or upgrade goes back to
/// polling.
///
/// The upgrade, in the order the protocol asks for it: the probe goes out (`probing`: the polling
/// reader starts no new GET; the server ends the pending one with a noop once it sees the probe);
/// a probe not answered within a short hold lets polling go on while it is still out (back to
/// `polling`: the server's pings must keep arriving); the probe is answered (`upgrading`: the upgrade waits until the reader is parked and the pending
/// POST is done); the upgrade packet is written (`websocket`: the parked reader is told to stop).
///
/// The heartbeat: the time of the last ping, and one deadline at that time + pingInterval +
/// pingTimeout. A ping only records its time; when the deadline comes, it moves on to the new limit
/// if a ping arrived since, or ends the session with a timeout.
struct EngineIOSessionMachine<ReaderWaiter, PauseWaiter> {
    enum Phase: Equatable, Sendable {
        /// Waiting for the open packet.
        case opening
        /// Open on polling, no upgrade under way.
        case polling
        /// The WebSocket probe is out and its hold has not ended: the polling reader starts no new GET.
        case probing
        /// The probe was answered: polling is paused (the pending GET and POST finish), then the
        /// upgrade packet goes out.
        case upgrading
        /// The session runs on the WebSocket.
        case websocket
        /// The session is over.
        case closed
    }

    /// What the polling reader does before its next GET.
    enum ReaderStep: Equatable, Sendable {
        case poll
        /// Wait for the upgrade's outcome (``readerParks(_:)``).
        case park
        case stop
    }

    /// What becomes of a reader that offers to park.
    enum ParkAction {
        /// Resume it at once: with `stop` true it stops polling, with false it polls.
        case resume(ReaderWaiter, stop: Bool)
        /// It waits for the outcome; `wake` is the upgrade that waited for it, to be resumed.
        case parked(wake: PauseWaiter?)
    }

    /// What becomes of the upgrade asking for polling to pause.
    enum PauseAction {
        /// The reader is parked (or the session is over): resume the upgrade at once.
        case proceed(PauseWaiter)
        /// It waits until the reader parks.
        case wait
    }

    /// What the heartbeat's deadline finds.
    enum HeartbeatVerdict: Sendable {
        /// A ping arrived since: the next deadline is at this time.
        case rearm(at: Duration)
        /// No ping within the limit: the session fails with this error.
        case expired(RealtimeError)
        /// Nothing is watched (not open yet, already expired, or the session is over).
        case idle
    }

    private(set) var phase: Phase = .opening
    private(set) var handshake: EngineIOHandshake?
    /// We asked to close: the close packet is queued.
    private(set) var closeRequested = false
    /// Set once the heartbeat expired; the session's readers end with it.
    private(set) var heartbeatFailure: RealtimeError?
    private var parkedReader: ReaderWaiter?
    private var pauseWaiter: PauseWaiter?
    private var lastPing: Duration = .zero
    private var heartbeatLimit: Duration?
    /// Engine.IO 3: the client pings and the server's pongs are what is watched.
    private var clientPings = false

    /// The transport carrying the session: polling until it runs on the WebSocket.
    var transport: EngineIOOptions.Transport { phase == .websocket ? .websocket : .polling }

    // MARK: Opening and closing

    /// The open packet arrived on `transport` at `now`. Returns the heartbeat's first deadline, to
    /// be armed on the timer queue.
    mutating func opened(
        _ handshake: EngineIOHandshake, on transport: EngineIOOptions.Transport, now: Duration, clientPings: Bool = false
    ) -> Duration {
        self.handshake = handshake
        self.clientPings = clientPings
        if phase == .opening { phase = transport == .websocket ? .websocket : .polling }
        let limit = handshake.pingInterval + handshake.pingTimeout
        lastPing = now
        heartbeatLimit = limit
        return now + limit
    }

    /// The app asked to close; the close packet is queued. Returns false when it already was
    /// (the packet goes once).
    @discardableResult
    mutating func closing() -> Bool {
        defer { closeRequested = true }
        return !closeRequested
    }

    /// The session is over. Returns the waiters still parked, to be resumed (the reader stops, the
    /// upgrade goes on to find the session ended).
    mutating func ended() -> (reader: ReaderWaiter?, upgrade: PauseWaiter?) {
        phase = .closed
        heartbeatLimit = nil
        defer {
            parkedReader = nil
            pauseWaiter = nil
        }
        return (parkedReader, pauseWaiter)
    }

    // MARK: The polling reader

    /// The polling reader is about to start a GET.
    func readerStep() -> ReaderStep {
        switch phase {
        case .opening, .polling: .poll
        case .probing, .upgrading: .park
        case .websocket, .closed: .stop
        }
    }

    /// The reader waits for the upgrade's outcome (it found ``ReaderStep/park``, but the outcome
    /// may have come since).
    mutating func readerParks(_ waiter: ReaderWaiter) -> ParkAction {
        switch phase {
        case .opening, .polling:
            return .resume(waiter, stop: false)
        case .websocket, .closed:
            return .resume(waiter, stop: true)
        case .probing, .upgrading:
            parkedReader = waiter
            defer { pauseWaiter = nil }
            return .parked(wake: pauseWaiter)
        }
    }

    /// The parked reader's task was cancelled (the session is ending): returns it, to be stopped.
    mutating func readerCancelled() -> ReaderWaiter? {
        defer { parkedReader = nil }
        return parkedReader
    }

    // MARK: The upgrade

    /// The probe is about to be sent: the reader starts no new GET from here.
    mutating func probing() {
        if phase == .polling { phase = .probing }
    }

    /// The probe is still out when its hold ends: polling goes on while it waits for the answer (an
    /// answer then pauses polling from `polling`). Returns the parked reader, to poll again.
    mutating func probeHoldEnded() -> ReaderWaiter? {
        guard phase == .probing else { return nil }
        phase = .polling
        defer { parkedReader = nil }
        return parkedReader
    }

    /// The probe was answered: the upgrade waits until the reader is parked.
    mutating func pausePolling(_ waiter: PauseWaiter) -> PauseAction {
        switch phase {
        case .polling, .probing, .upgrading:
            phase = .upgrading
            if parkedReader != nil { return .proceed(waiter) }
            pauseWaiter = waiter
            return .wait
        case .opening, .websocket, .closed:
            return .proceed(waiter)
        }
    }

    /// The upgrade's task was cancelled while it waited for the reader: returns it, to be resumed.
    mutating func pauseCancelled() -> PauseWaiter? {
        defer { pauseWaiter = nil }
        return pauseWaiter
    }

    /// The upgrade packet was written: the session runs on the WebSocket. Returns the parked
    /// reader, to be stopped.
    mutating func upgraded() -> ReaderWaiter? {
        if phase != .closed { phase = .websocket }
        defer { parkedReader = nil }
        return parkedReader
    }

    /// The probe or the upgrade failed: polling goes on. Returns the parked reader, to poll again.
    mutating func upgradeFailed() -> ReaderWaiter? {
        if phase == .probing || phase == .upgrading { phase = .polling }
        pauseWaiter = nil
        defer { parkedReader = nil }
        return parkedReader
    }

    // MARK: The heartbeat

    /// A ping arrived at `now` (Engine.IO 3: a pong).
    mutating func pinged(now: Duration) {
        lastPing = now
    }

    /// The heartbeat's deadline came at `now`.
    mutating func heartbeatDue(now: Duration) -> HeartbeatVerdict {
        guard let limit = heartbeatLimit, phase != .closed else { return .idle }
        let deadline = lastPing + limit
        if now < deadline { return .rearm(at: deadline) }
        heartbeatLimit = nil
        let error = RealtimeError.timeout(
            clientPings
                ? "no pong from the server within pingInterval + pingTimeout (\(limit))"
                : "no ping from the server within pingInterval + pingTimeout (\(limit))"
        ).at(.established)
        heartbeatFailure = error
        return .expired(error)
    }
}

extension EngineIOSessionMachine: Sendable where ReaderWaiter: Sendable, PauseWaiter: Sendable {}
