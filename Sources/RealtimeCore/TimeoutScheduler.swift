import NIOConcurrencyHelpers

/// Timeouts for many pending requests (acks, invocations) with one timer task instead of one task
/// per request.
///
/// `schedule` and `cancel` only touch a dictionary under a lock. A single task sleeps on the runtime's
/// clock until the earliest deadline; it is replaced only when a new deadline comes before the one
/// it sleeps for, which with one fixed timeout per client never happens. Expired keys are handed to
/// `onExpire` (outside the lock), once each; a key cancelled first is never reported.
package final class TimeoutScheduler<Key: Hashable & Sendable>: Sendable {
    private struct State {
        var deadlines: [Key: Duration] = [:]
        /// When the timer task wakes up; nil when no task runs.
        var wakeAt: Duration?
        var timer: Task<Void, Never>?
        var generation = 0
        var closed = false
    }

    private let state = NIOLockedValueBox(State())
    private let timeline: ClockTimeline
    private let onExpire: @Sendable (Key) -> Void

    /// - Parameters:
    ///   - clock: the clock deadlines are measured on (the runtime's; a manual clock in tests).
    ///   - onExpire: called once for every key whose deadline passed before it was cancelled.
    package init(clock: some Clock<Duration>, onExpire: @escaping @Sendable (Key) -> Void) {
        timeline = ClockTimeline(clock: clock)
        self.onExpire = onExpire
    }

    /// Starts (or restarts) the timeout of `key`.
    package func schedule(_ key: Key, after timeout: Duration) {
        let deadline = timeline.now + timeout
        let replaced = state.withLockedValue { state -> Task<Void, Never>? in
            if state.closed { return nil }
            state.deadlines[key] = deadline
            if let wakeAt = state.wakeAt, wakeAt <= deadline { return nil }
            let previous = state.timer
            state.generation += 1
            state.wakeAt = deadline
            let generation = state.generation
            state.timer = Task { await self.run(generation: generation) }
            return previous
        }
        replaced?.cancel()
    }

    /// Stops the timeout of `key`; returns whether it was still pending.
    @discardableResult
    package func cancel(_ key: Key) -> Bool {
        state.withLockedValue { $0.deadlines.removeValue(forKey: key) != nil }
    }

    /// Forgets every pending timeout and stops the timer task. With `permanently`, later calls to
    /// ``schedule(_:after:)`` are ignored.
    package func cancelAll(permanently: Bool = false) {
        let timer = state.withLockedValue { state -> Task<Void, Never>? in
            state.deadlines = [:]
            state.closed = state.closed || permanently
            state.generation += 1
            state.wakeAt = nil
            defer { state.timer = nil }
            return state.timer
        }
        timer?.cancel()
    }

    /// How many timeouts are pending.
    package var pendingCount: Int { state.withLockedValue { $0.deadlines.count } }

    private func run(generation: Int) async {
        while true {
            let wakeAt = state.withLockedValue { $0.generation == generation ? $0.wakeAt : nil }
            guard let wakeAt else { return }
            do { try await timeline.sleep(until: wakeAt) } catch { return }
            let current = timeline.now
            let expired = state.withLockedValue { state -> [Key]? in
                guard state.generation == generation else { return nil }
                var expired: [(key: Key, deadline: Duration)] = []
                var next: Duration?
                for (key, deadline) in state.deadlines {
                    if deadline <= current {
                        expired.append((key, deadline))
                    } else if next.map({ deadline < $0 }) ?? true {
                        next = deadline
                    }
                }
                for entry in expired { state.deadlines.removeValue(forKey: entry.key) }
                state.wakeAt = next
                if next == nil { state.timer = nil }
                return expired.sorted { $0.deadline < $1.deadline }.map(\.key)
            }
            guard let expired else { return }
            for key in expired { onExpire(key) }
        }
    }
}
