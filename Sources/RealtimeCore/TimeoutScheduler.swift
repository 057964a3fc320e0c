import NIOConcurrencyHelpers

/// Timeouts for many pending requests (acks, invocations) by key, on a ``TimerQueue``.
///
/// `schedule` and `cancel` touch a dictionary and the queue's heap under locks; no task is made per
/// request (the queue's one task sleeps for every deadline of the runtime). Expired keys are handed
/// to `onExpire`, once each; a key cancelled or rescheduled first is never reported for its old
/// deadline.
package final class TimeoutScheduler<Key: Hashable & Sendable>: Sendable {
    private struct State {
        /// Each key's timer, with the token its action carries (a rescheduled key's old action
        /// finds another token and does nothing).
        var timers: [Key: (timer: TimerQueue.Timer, token: UInt64)] = [:]
        var nextToken: UInt64 = 0
        var closed = false
    }

    private let state = NIOLockedValueBox(State())
    private let queue: TimerQueue
    private let onExpire: @Sendable (Key) -> Void

    /// - Parameters:
    ///   - timers: the queue deadlines go on (the runtime's).
    ///   - onExpire: called once for every key whose deadline passed before it was cancelled.
    package init(timers: TimerQueue, onExpire: @escaping @Sendable (Key) -> Void) {
        queue = timers
        self.onExpire = onExpire
    }

    /// A scheduler with a queue of its own on `clock`.
    package convenience init(clock: some Clock<Duration>, onExpire: @escaping @Sendable (Key) -> Void) {
        self.init(timers: TimerQueue(clock: clock), onExpire: onExpire)
    }

    /// Starts (or restarts) the timeout of `key`.
    package func schedule(_ key: Key, after timeout: Duration) {
        let replaced = state.withLockedValue { state -> TimerQueue.Timer? in
            if state.closed { return nil }
            state.nextToken &+= 1
            let token = state.nextToken
            let timer = queue.schedule(after: timeout) { [weak self] in self?.expire(key, token: token) }
            return state.timers.updateValue((timer, token), forKey: key)?.timer
        }
        if let replaced { queue.cancel(replaced) }
    }

    /// Stops the timeout of `key`; returns whether it was still pending.
    @discardableResult
    package func cancel(_ key: Key) -> Bool {
        guard let entry = state.withLockedValue({ $0.timers.removeValue(forKey: key) }) else { return false }
        queue.cancel(entry.timer)
        return true
    }

    /// Forgets every pending timeout. With `permanently`, later calls to ``schedule(_:after:)`` are
    /// ignored.
    package func cancelAll(permanently: Bool = false) {
        let timers = state.withLockedValue { state -> [TimerQueue.Timer] in
            state.closed = state.closed || permanently
            defer { state.timers = [:] }
            return state.timers.values.map(\.timer)
        }
        for timer in timers { queue.cancel(timer) }
    }

    /// How many timeouts are pending.
    package var pendingCount: Int { state.withLockedValue { $0.timers.count } }

    private func expire(_ key: Key, token: UInt64) {
        let current = state.withLockedValue { state -> Bool in
            guard state.timers[key]?.token == token else { return false }
            state.timers.removeValue(forKey: key)
            return true
        }
        if current { onExpire(key) }
    }
}
