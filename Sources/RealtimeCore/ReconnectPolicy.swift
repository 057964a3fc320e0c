/// When and how a client reconnects after an unexpected drop.
public struct ReconnectPolicy: Sendable {
    /// The delays between attempts, and when to give up.
    public var backoff: BackoffPolicy
    /// Consulted before every attempt; the loop waits until it says the network is up.
    public var reachability: any Reachability
    /// Whether an error is worth another attempt. The default retries everything but invalid URLs,
    /// certificate problems and cancellation.
    public var shouldRetry: @Sendable (RealtimeError) -> Bool
    /// A connection that stays open this long (or carries a message) resets the attempt count; one
    /// that drops sooner counts as a failed attempt, so a server that accepts and drops at once is
    /// not retried forever. Default 5 s.
    public var stableAfter: Duration

    /// Makes a policy; every parameter is the property of the same name.
    public init(
        backoff: BackoffPolicy = .exponential(),
        reachability: any Reachability = PollingReachability(),
        shouldRetry: @escaping @Sendable (RealtimeError) -> Bool = ReconnectPolicy.defaultShouldRetry,
        stableAfter: Duration = .seconds(5)
    ) {
        self.backoff = backoff
        self.reachability = reachability
        self.shouldRetry = shouldRetry
        self.stableAfter = stableAfter
    }

    /// No reconnection at all.
    public static var disabled: ReconnectPolicy { ReconnectPolicy(backoff: .never, reachability: AlwaysReachable()) }

    /// The default ``shouldRetry``: retries everything but an invalid URL, a TLS or pinning failure
    /// and a cancellation.
    public static let defaultShouldRetry: @Sendable (RealtimeError) -> Bool = { error in
        switch error.code {
        case .invalidURL, .tlsFailure, .certificatePinMismatch, .cancelled: false
        default: true
        }
    }
}
