import RealtimeCore

/// One connection attempt's transport fallback, as a value: which transport to open next and what
/// a transport's end means. The client does the I/O and feeds the outcomes in; the machine has no
/// socket, task or clock, so every path is tested as plain values.
///
/// The rules (../specs/spreadbot.md): the configured transports are tried in order; a transport
/// that fails before it opened hands over to the next one (the failure is reported, the next is
/// tried at once); once one has opened, its end ends the attempt, and the reconnect driver decides
/// about the next one. A refused authentication is never retried with another transport. When the
/// last transport fails before opening, the attempt fails with that error (the reconnect loop
/// reports it, so it is not reported twice).
struct SpreadbotFallback: Sendable {
    enum Action: Sendable {
        /// Open this transport.
        case open(SpreadbotTransport)
        /// `failed` could not be opened: report `error`, then open `next`.
        case fallBack(failed: SpreadbotTransport, error: RealtimeError, next: SpreadbotTransport)
        /// An open transport ended: the attempt is over and the connection dropped (the server's
        /// `retry:` hint, for an event stream, as the least delay).
        case dropped(RealtimeError, minimumDelay: Duration?)
        /// The attempt failed before any transport opened, or authentication was refused.
        case failed(RealtimeError)
    }

    private let transports: [SpreadbotTransport]
    private var index = 0
    private var opened = false

    init(transports: [SpreadbotTransport]) {
        self.transports = transports
    }

    /// The transport being tried (nil once the attempt is over or when none is configured).
    var current: SpreadbotTransport? { index < transports.count ? transports[index] : nil }

    /// The first action of the attempt.
    mutating func start() -> Action {
        guard let first = current else { return .failed(RealtimeError(.connectFailed, "no transport is configured")) }
        return .open(first)
    }

    /// The current transport opened (its first bytes or its upgrade arrived).
    mutating func didOpen() {
        opened = true
    }

    /// The current transport ended: `error` nil when the server ended the stream cleanly (a
    /// dropped connection then, opened or not: the server answered).
    mutating func ended(_ error: RealtimeError?, retryHint: Duration? = nil) -> Action {
        guard let transport = current else { return .failed(error ?? RealtimeError(.connectFailed, "no transport is configured")) }
        let hint = transport == .serverSentEvents ? retryHint : nil
        guard let failure = error else {
            index = transports.count
            return .dropped(RealtimeError(.connectionClosed, "the server ended the \(transport) stream"), minimumDelay: hint)
        }
        if opened {
            index = transports.count
            return .dropped(failure, minimumDelay: hint)
        }
        if failure.code == .authenticationFailed || index + 1 >= transports.count {
            index = transports.count
            return .failed(failure)
        }
        index += 1
        return .fallBack(failed: transport, error: failure, next: transports[index])
    }
}
