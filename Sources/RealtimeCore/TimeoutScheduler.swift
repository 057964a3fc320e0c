import NIOConcurrencyHelpers

/// Timeouts for many pending requests (acks, invocations) by id, on a ``TimerQueue``.
///
/// A key's deadline is a value in a dictionary: `schedule` and `cancel` take one lock and touch no
/// timer. One timer-queue entry is armed for the earliest deadline known when it was set; when it
/// fires, the keys whose deadline has passed are handed to `onExpire` (once each, earliest first) and
/// the entry is armed again for the earliest deadline left. A request answered before its timeout
/// (the usual case) costs a dictionary insert and remove, not a timer scheduled and cancelled: with
/// timeouts of one length, later deadlines never move the armed entry. A key cancelled or
/// rescheduled first is never reported for its old deadline.
/// Keys are integer ids (what acks and invocations are numbered with): the scheduler is not generic,
/// so its dictionary work is compiled for them rather than run through generic witnesses from
/// another module on every request.
package final class TimeoutScheduler: Sendable {
    package typealias Key = Int

    private struct State {
        /// Each key's deadline, with the order it was scheduled in (keys due at one instant are
        /// reported in that order).
        var deadlines: [Key: (at: Duration, order: UInt64)] = [:]
        var scheduled: UInt64 = 0
        /// The timer-queue entry, and the deadline it was armed for.
        var armed: (timer: TimerQueue.Timer, at: Duration)?
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
        let deadline = queue.now + timeout
        let replaced = state.withLockedValue { state -> TimerQueue.Timer? in
            if state.closed { return nil }
            state.scheduled &+= 1
            state.deadlines[key] = (deadline, state.scheduled)
            if let armed = state.armed, armed.at <= deadline { return nil }
            return arm(at: deadline, &state)
        }
        if let replaced { queue.cancel(replaced) }
    }

    /// Stops the timeout of `key`; returns whether it was still pending.
    @discardableResult
    package func cancel(_ key: Key) -> Bool {
        let (found, idle) = state.withLockedValue { state -> (Bool, TimerQueue.Timer?) in
            guard state.deadlines.removeValue(forKey: key) != nil else { return (false, nil) }
            // Nothing left to time out: the queue need not wake for this scheduler.
            guard state.deadlines.isEmpty, let armed = state.armed else { return (true, nil) }
            state.armed = nil
            return (true, armed.timer)
        }
        if let idle { queue.cancel(idle) }
        return found
    }

    /// Forgets every pending timeout. With `permanently`, later calls to ``schedule(_:after:)`` are
    /// ignored.
    package func cancelAll(permanently: Bool = false) {
        let armed = state.withLockedValue { state -> TimerQueue.Timer? in
            state.closed = state.closed || permanently
            state.deadlines = [:]
            defer { state.armed = nil }
            return state.armed?.timer
        }
        if let armed { queue.cancel(armed) }
    }

    /// How many timeouts are pending.
    package var pendingCount: Int { state.withLockedValue { $0.deadlines.count } }

    /// Arms the queue's entry for `deadline` (under the lock); returns the entry it replaces.
    private func arm(at deadline: Duration, _ state: inout State) -> TimerQueue.Timer? {
        let previous = state.armed?.timer
        let timer = queue.schedule(at: deadline) { [weak self] in self?.fire() }
        state.armed = (timer, deadline)
        return previous
    }

    /// The armed entry's deadline came: reports every key due, then arms for the earliest left.
    private func fire() {
        let now = queue.now
        let due = state.withLockedValue { state -> [(key: Key, at: Duration, order: UInt64)] in
            state.armed = nil
            var due: [(key: Key, at: Duration, order: UInt64)] = []
            var earliest: Duration?
            for (key, deadline) in state.deadlines {
                if deadline.at <= now {
                    due.append((key, deadline.at, deadline.order))
                } else if earliest.map({ deadline.at < $0 }) ?? true {
                    earliest = deadline.at
                }
            }
            for entry in due { state.deadlines.removeValue(forKey: entry.key) }
            if let earliest, !state.closed { _ = arm(at: earliest, &state) }
            return due
        }
        for entry in due.sorted(by: { ($0.at, $0.order) < ($1.at, $1.order) }) { onExpire(entry.key) }
    }
}
