import NIOConcurrencyHelpers

/// A clock that moves only when a test says so, so timers (backoff, heartbeats, timeouts) are
/// tested without sleeping.
public final class ManualClock: Clock, Sendable {
    /// A point on the manual clock: the time advanced since it was made.
    public struct Instant: InstantProtocol, Sendable {
        /// Time since the clock was made.
        public var offset: Duration
        /// The instant `offset` after the clock was made.
        public init(offset: Duration) { self.offset = offset }
        /// The instant `duration` later.
        public func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        /// The time from this instant to `other`.
        public func duration(to other: Instant) -> Duration { other.offset - offset }
        /// Whether `lhs` comes before `rhs`.
        public static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }

    private struct Sleeper {
        let deadline: Instant
        let continuation: CheckedContinuation<Void, any Error>
    }
    private struct State {
        var now = Instant(offset: .zero)
        var sleepers: [Int: Sleeper] = [:]
        var cancelled: Set<Int> = []
        var nextID = 0
        var sleepLog: [Duration] = []
    }
    private let state = NIOLockedValueBox(State())

    /// Makes a value with every default.
    public init() {}

    /// The current instant; it moves only when a test advances the clock.
    public var now: Instant { state.withLockedValue { $0.now } }
    /// One nanosecond.
    public var minimumResolution: Duration { .nanoseconds(1) }

    /// Every duration anyone slept for, in order.
    public var sleeps: [Duration] { state.withLockedValue { $0.sleepLog } }
    /// How many sleepers are waiting now.
    public var sleeperCount: Int { state.withLockedValue { $0.sleepers.count } }

    /// Returns once the clock was advanced to `deadline` (at once if it is past); throws
    /// `CancellationError` when cancelled.
    public func sleep(until deadline: Instant, tolerance: Duration? = nil) async throws {
        let id = state.withLockedValue { state -> Int in
            defer { state.nextID += 1 }
            state.sleepLog.append(deadline.offset - state.now.offset)
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resume: Result<Void, any Error>? = state.withLockedValue { state in
                    if state.cancelled.remove(id) != nil { return .failure(CancellationError()) }
                    if deadline <= state.now { return .success(()) }
                    state.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
                    return nil
                }
                if let resume { continuation.resume(with: resume) }
            }
        } onCancel: {
            let sleeper = state.withLockedValue { state in
                let sleeper = state.sleepers.removeValue(forKey: id)
                if sleeper == nil { state.cancelled.insert(id) }
                return sleeper
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves time forward and wakes every sleeper whose deadline has come.
    public func advance(by duration: Duration) {
        let due = state.withLockedValue { state -> [Sleeper] in
            state.now = state.now.advanced(by: duration)
            let now = state.now
            let due = state.sleepers.filter { $0.value.deadline <= now }
            for key in due.keys { state.sleepers.removeValue(forKey: key) }
            return due.values.sorted { $0.deadline < $1.deadline }
        }
        for sleeper in due { sleeper.continuation.resume() }
    }

    /// Waits (yielding, never sleeping on a real clock for long) until `count` sleepers wait.
    public func waitForSleepers(_ count: Int = 1, limit: Duration = .seconds(30)) async throws {
        let start = ContinuousClock.now
        while sleeperCount < count {
            if ContinuousClock.now - start > limit {
                throw LoopbackServerError(message: "timed out waiting for \(count) sleepers on the manual clock")
            }
            try await Task.sleep(for: .milliseconds(1))
        }
    }
}
