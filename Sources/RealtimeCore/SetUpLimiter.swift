import DequeModule
import NIOConcurrencyHelpers

/// Bounds the connections being set up at once to one host (TCP connect, proxy tunnel, TLS
/// handshake, WebSocket upgrade): past ``HTTPConnectionOptions/maxConnectingPerHost`` a set-up
/// waits its turn, first come first served.
///
/// What a set-up allocates is mostly given back once the connection is open. Two thousand set-ups
/// at once leave that much freed memory scattered between the open connections' objects, where the
/// allocator cannot return it: the process keeps it. A bounded number at a time reuses the same
/// memory, so an application that opens its connections all at once ends up with the footprint of
/// one that opens them a few at a time.
package final class SetUpLimiter: Sendable {
    private struct Waiter {
        let id: UInt64
        /// Resumes the waiting task, or tells a set-up without a task (``request(host:limit:within:timers:timeoutError:_:)``).
        let granted: @Sendable (Result<Void, any Error>) -> Void
        /// The timer that ends the wait, once armed (a wait with a time limit).
        var timer: (queue: TimerQueue, timer: TimerQueue.Timer)?

        /// Ends the wait, disarming its timer.
        func resume(with result: Result<Void, any Error>) {
            if let timer { timer.queue.cancel(timer.timer) }
            granted(result)
        }
    }

    private struct Host {
        var active = 0
        var waiters: Deque<Waiter> = []
    }

    private struct State {
        var nextID: UInt64 = 0
        var hosts: [String: Host] = [:]
    }

    private let state = NIOLockedValueBox(State())

    package init() {}

    /// Waits in the caller's task until fewer than `limit` set-ups to `host` run, for at most
    /// `timeout` on `timers`; the caller then holds a slot and gives it back with
    /// ``release(host:limit:)``. Throws `timeoutError` when the time passes first and
    /// `CancellationError` when the task is cancelled.
    ///
    /// A waiter costs a continuation and a timer entry, no task of its own: set-ups asked for by
    /// the thousand at once allocate no more than `limit` set-ups' worth of transient memory, so
    /// little of it is left scattered between the open connections' objects.
    package func acquire(
        host: String, limit: Int, within timeout: Duration, timers: TimerQueue, timeoutError: RealtimeError
    ) async throws {
        try await wait(host: host, limit: limit, within: timeout, timers: timers, timeoutError: timeoutError, waiting: nil)
    }

    /// The host whose set-up slot the current task holds (``withSlot(host:limit:within:timers:timeoutError:waiting:_:)``),
    /// for the set-up nested in it to say so in its configuration
    /// (``WebSocketConfiguration/setUpSlotHeld``: a WebSocket opened by a SignalR start).
    @TaskLocal package static var heldHost: String?

    /// Runs `body` holding a slot for `host`, waited for in the caller's task within `timeout`.
    /// While it waits, `waiting` gets the request's id, so that the owner can withdraw it
    /// (``cancelRequest(host:id:)``, which fails the wait with `CancellationError`), and nil when
    /// the wait is over.
    package func withSlot<T>(
        host: String, limit: Int, within timeout: Duration, timers: TimerQueue, timeoutError: RealtimeError,
        waiting: @escaping @Sendable (UInt64?) -> Void, _ body: () async throws -> T
    ) async throws -> T {
        try await wait(host: host, limit: limit, within: timeout, timers: timers, timeoutError: timeoutError, waiting: waiting)
        defer { release(host: host, limit: limit) }
        return try await Self.$heldHost.withValue(host) { try await body() }
    }

    /// ``request(host:limit:within:timers:timeoutError:_:)`` awaited: returns holding a slot.
    /// A task cancelled while it waits leaves the line; one cancelled as the slot is handed over
    /// gives it back; both throw `CancellationError`.
    private func wait(
        host: String, limit: Int, within timeout: Duration, timers: TimerQueue, timeoutError: RealtimeError,
        waiting: (@Sendable (UInt64?) -> Void)?
    ) async throws {
        let asked = NIOLockedValueBox<UInt64?>(nil)
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let id = request(host: host, limit: limit, timeout: (timeout, timeoutError), timers: timers) { result in
                    waiting?(nil)
                    continuation.resume(with: result)
                }
                asked.withLockedValue { $0 = id }
                if let waiting, isWaiting(host: host, id: id) { waiting(id) }
                // Cancelled before the id was known: the handler below found nothing to withdraw.
                if Task.isCancelled { cancelRequest(host: host, id: id) }
            }
        } onCancel: {
            if let id = asked.withLockedValue({ $0 }) { cancelRequest(host: host, id: id) }
        }
        if Task.isCancelled {
            release(host: host, limit: limit)
            throw CancellationError()
        }
    }

    /// Asks for a slot without waiting in a task. `granted` runs once: with success when the slot
    /// is the caller's (it gives it back with ``release(host:limit:)``), with the timeout's error
    /// when its time on `timers` passes first (nil: the request waits until its turn), or with `CancellationError` after
    /// ``cancelRequest(host:id:)``. It runs before this returns when a slot is free. Returns the
    /// request's id.
    @discardableResult
    package func request(
        host: String, limit: Int, timeout: (after: Duration, error: RealtimeError)?, timers: TimerQueue,
        _ granted: @escaping @Sendable (Result<Void, any Error>) -> Void
    ) -> UInt64 {
        let (id, enqueued) = state.withLockedValue { state -> (UInt64, Bool) in
            state.nextID += 1
            if state.hosts[host, default: Host()].active < max(limit, 1) {
                state.hosts[host, default: Host()].active += 1
                return (state.nextID, false)
            }
            state.hosts[host, default: Host()].waiters.append(Waiter(id: state.nextID, granted: granted))
            return (state.nextID, true)
        }
        if enqueued {
            if let timeout { arm(host: host, id: id, timers: timers, after: timeout.after, error: timeout.error) }
        } else {
            granted(.success(()))
        }
        return id
    }

    /// Withdraws request `id` while it waits: its callback runs with `CancellationError`. Nothing
    /// when it already has its slot (the caller then gives the slot back).
    package func cancelRequest(host: String, id: UInt64) {
        withdraw(host: host, id: id, error: CancellationError())
    }

    /// Whether request `id` still waits in line.
    package func isWaiting(host: String, id: UInt64) -> Bool {
        state.withLockedValue { $0.hosts[host]?.waiters.contains(where: { $0.id == id }) ?? false }
    }

    /// Set-ups running and waiting for `host` now (for tests).
    package func counts(host: String) -> (running: Int, waiting: Int) {
        state.withLockedValue { state in
            let entry = state.hosts[host]
            return (entry?.active ?? 0, entry?.waiters.count ?? 0)
        }
    }

    /// Arms the timer of waiter `id`, once it is in line: the timer finds it there, or finds it gone
    /// (it got its slot, or was withdrawn).
    private func arm(host: String, id: UInt64, timers: TimerQueue, after timeout: Duration, error: RealtimeError) {
        let timer = timers.schedule(after: timeout) { [weak self] in
            self?.withdraw(host: host, id: id, error: error)
        }
        let armed = state.withLockedValue { state -> Bool in
            guard let index = state.hosts[host]?.waiters.firstIndex(where: { $0.id == id }) else { return false }
            state.hosts[host]?.waiters[index].timer = (timers, timer)
            return true
        }
        if !armed { timers.cancel(timer) }
    }

    /// Takes waiter `id` out of the line and fails it with `error`; nothing when it is not there.
    private func withdraw(host: String, id: UInt64, error: any Error) {
        let waiter = state.withLockedValue { state -> Waiter? in
            guard let index = state.hosts[host]?.waiters.firstIndex(where: { $0.id == id }) else { return nil }
            return state.hosts[host]?.waiters.remove(at: index)
        }
        waiter?.resume(with: .failure(error))
    }

    /// Gives back a slot (one taken with ``acquire(host:limit:within:timers:timeoutError:)``).
    package func release(host: String, limit: Int) {
        let next = state.withLockedValue { state -> Waiter? in
            guard var entry = state.hosts[host] else { return nil }
            if entry.active <= max(limit, 1), let next = entry.waiters.popFirst() {
                // The slot passes to the next waiter.
                state.hosts[host] = entry
                return next
            }
            entry.active -= 1
            if entry.active == 0 && entry.waiters.isEmpty {
                state.hosts[host] = nil
            } else {
                state.hosts[host] = entry
            }
            return nil
        }
        next?.resume(with: .success(()))
    }
}
