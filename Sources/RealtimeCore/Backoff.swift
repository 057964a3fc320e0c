/// How long to wait before each reconnect attempt, and when to give up.
///
/// A pure description: ``delay(forAttempt:random:)`` is a function of the attempt number and a random
/// number in `0..<1`, so it can be tested with the randomness fixed.
public struct BackoffPolicy: Sendable {
    enum Kind: Sendable {
        case exponential(initial: Duration, maximum: Duration, multiplier: Double, randomization: Double, maxAttempts: Int?)
        case fixed([Duration])
        case custom(@Sendable (_ attempt: Int) -> Duration?)
        case asking(@Sendable (Attempt) -> Duration?)
    }

    /// What a policy made with ``asking(_:)`` is told before each reconnect attempt.
    public struct Attempt: Sendable {
        /// The attempt's number, from 1 (counted across reconnected connections that dropped before
        /// they proved stable).
        public var number: Int
        /// The time since the connection was lost (the drop that began these attempts).
        public var elapsed: Duration
        /// Why the last attempt failed, or why the connection was lost; nil when not known.
        public var reason: RealtimeError?

        /// Makes an attempt's description (for tests of a policy).
        public init(number: Int, elapsed: Duration = .zero, reason: RealtimeError? = nil) {
            self.number = number
            self.elapsed = elapsed
            self.reason = reason
        }
    }

    let kind: Kind

    /// Exponential backoff in the style of the Socket.IO clients: attempt `n` (1-based) waits
    /// `initial * multiplier^(n-1)`, spread by ±`randomizationFactor`, capped at `maximum`.
    /// `maxAttempts: nil` retries forever.
    public static func exponential(
        initial: Duration = .seconds(1),
        maximum: Duration = .seconds(5),
        multiplier: Double = 2,
        randomizationFactor: Double = 0.5,
        maxAttempts: Int? = nil
    ) -> BackoffPolicy {
        BackoffPolicy(kind: .exponential(
            initial: initial, maximum: maximum, multiplier: max(1, multiplier),
            randomization: min(max(randomizationFactor, 0), 1), maxAttempts: maxAttempts))
    }

    /// A fixed list of delays in the style of SignalR (`[0, 2, 10, 30]` seconds): attempt `n` waits
    /// the `n`-th delay; after the list, give up.
    public static func fixed(_ delays: [Duration]) -> BackoffPolicy {
        BackoffPolicy(kind: .fixed(delays))
    }

    /// SignalR's default: 0, 2, 10 and 30 seconds, then stop.
    public static var signalRDefault: BackoffPolicy { .fixed([.zero, .seconds(2), .seconds(10), .seconds(30)]) }

    /// Never reconnect.
    public static var never: BackoffPolicy { .fixed([]) }

    /// Your own function: return the delay before attempt `n` (1-based), or `nil` to give up.
    public static func custom(_ delay: @escaping @Sendable (_ attempt: Int) -> Duration?) -> BackoffPolicy {
        BackoffPolicy(kind: .custom(delay))
    }

    /// Your own function, told the attempt's number, the time since the connection was lost and
    /// the last failure (the shape of SignalR's `IRetryPolicy`): return the delay before the
    /// attempt, or `nil` to give up.
    public static func asking(_ delay: @escaping @Sendable (Attempt) -> Duration?) -> BackoffPolicy {
        BackoffPolicy(kind: .asking(delay))
    }

    /// The delay before a reconnect attempt, or `nil` to stop trying.
    /// - Parameters:
    ///   - attempt: the attempt's number, from 1.
    ///   - random: a number in `0..<1` that drives the jitter.
    public func delay(forAttempt attempt: Int, random: Double) -> Duration? {
        delay(for: Attempt(number: attempt), random: random)
    }

    /// The delay before `attempt`, or `nil` to stop trying; `random` (in `0..<1`) drives the jitter.
    public func delay(for attempt: Attempt, random: Double) -> Duration? {
        precondition(attempt.number >= 1, "attempts are counted from 1")
        let number = attempt.number
        switch kind {
        case .exponential(let initial, let maximum, let multiplier, let randomization, let maxAttempts):
            if let maxAttempts, number > maxAttempts { return nil }
            let initialSeconds = initial.seconds
            let maxSeconds = maximum.seconds
            // Cap the exponent so large attempt numbers cannot overflow to infinity.
            var seconds = initialSeconds * pow(multiplier, Double(min(number - 1, 64)))
            if randomization > 0 {
                let deviation = seconds * randomization
                // Same rule as the engine.io/socket.io JS clients: the random draw picks add or subtract.
                seconds += (random < 0.5 ? -1 : 1) * deviation * random
            }
            seconds = min(max(seconds, 0), maxSeconds)
            return .seconds(seconds)
        case .fixed(let delays):
            return number <= delays.count ? delays[number - 1] : nil
        case .custom(let function):
            return function(number)
        case .asking(let function):
            return function(attempt)
        }
    }

    /// The delay for `attempt` with a draw from the system random generator.
    public func delay(forAttempt attempt: Int) -> Duration? {
        delay(forAttempt: attempt, random: Double.random(in: 0..<1))
    }
}

extension Duration {
    /// The duration as floating-point seconds.
    package var seconds: Double {
        let (whole, atto) = components
        return Double(whole) + Double(atto) / 1e18
    }
}

@inline(__always)
private func pow(_ base: Double, _ exponent: Double) -> Double {
    var result = 1.0
    var remaining = Int(exponent)
    var factor = base
    while remaining > 0 {
        if remaining & 1 == 1 { result *= factor }
        factor *= factor
        remaining >>= 1
    }
    return result
}
