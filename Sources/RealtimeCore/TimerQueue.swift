import NIOConcurrencyHelpers

/// Deadlines on one clock, for every connection of every client that shares a runtime.
///
/// A timer is an entry in a heap: scheduling and cancelling take a lock and touch no task. One task
/// sleeps on the clock until the earliest deadline, runs what is due and sleeps again; it exists
/// only while a deadline is pending, and is replaced only when a new deadline comes before the one
/// it sleeps for. So an idle connection's timers (heartbeat, idle timeout, handshake deadline) cost
/// a heap entry each, not a sleeping task, and a test's manual clock drives them all.
///
/// Actions run on that task, in deadline order. They must be short and must not block: resume a
/// continuation, cancel a request, hop onto an event loop.
///
/// On a real clock the task wakes on a grid of ``slack`` (10 ms): a deadline runs up to that much
/// late, never early, and deadlines in one cell of the grid run in one wake-up. Ten thousand idle
/// connections' keep-alive deadlines then cost at most 100 wake-ups a second, not one each. A
/// manual clock (tests) runs every deadline exactly when it is reached.
package final class TimerQueue: Sendable {
    /// A scheduled deadline, for ``cancel(_:)``.
    package struct Timer: Hashable, Sendable {
        fileprivate let id: UInt64
    }

    private struct Entry {
        var deadline: Duration
        var id: UInt64
        static func < (lhs: Entry, rhs: Entry) -> Bool {
            lhs.deadline < rhs.deadline || (lhs.deadline == rhs.deadline && lhs.id < rhs.id)
        }
    }

    private struct State {
        /// A binary min-heap; cancelled entries stay until they reach the top or the heap is compacted.
        var heap: [Entry] = []
        var actions: [UInt64: @Sendable () -> Void] = [:]
        var nextID: UInt64 = 1
        /// When the running task wakes up; nil when none runs.
        var wakeAt: Duration?
        var runner: Task<Void, Never>?
        var generation = 0
    }

    private let state = NIOLockedValueBox(State())
    private let timeline: ClockTimeline
    /// How late a deadline may run so that it shares a wake-up with others (zero: exactly).
    package let slack: Duration

    /// A queue on `clock`; `slack` nil: 10 ms on the continuous and suspending clocks, zero on any
    /// other (a manual clock in tests).
    package init(clock: any Clock<Duration>, slack: Duration? = nil) {
        timeline = ClockTimeline(clock: clock)
        self.slack = slack ?? (clock is ContinuousClock || clock is SuspendingClock ? .milliseconds(10) : .zero)
    }

    /// The wake-up that runs `deadline`: the end of its cell of the ``slack`` grid.
    private func wakeUp(for deadline: Duration) -> Duration {
        guard slack > .zero else { return deadline }
        let cells = (deadline / slack).rounded(.up)
        let wake = slack * cells
        return wake < deadline ? deadline : wake
    }

    /// Now, as an offset on this queue's timeline (the origin of every deadline).
    package var now: Duration { timeline.now }

    /// Deadlines pending (not yet due, not cancelled).
    package var pendingCount: Int { state.withLockedValue { $0.actions.count } }

    /// The earliest pending deadline (for tests that move a manual clock from one deadline to the next).
    package var nextDeadline: Duration? {
        state.withLockedValue { state in
            var earliest: Duration?
            for entry in state.heap where state.actions[entry.id] != nil { earliest = min(earliest ?? entry.deadline, entry.deadline) }
            return earliest
        }
    }

    /// Entries in the heap, cancelled ones included (for tests of its compaction).
    package var heapCount: Int { state.withLockedValue { $0.heap.count } }

    /// Runs `action` once `delay` has passed.
    @discardableResult
    package func schedule(after delay: Duration, _ action: @escaping @Sendable () -> Void) -> Timer {
        schedule(at: timeline.now + delay, action)
    }

    /// Runs `action` once the timeline reaches `deadline` (at once, on the queue's task, if it has).
    @discardableResult
    package func schedule(at deadline: Duration, _ action: @escaping @Sendable () -> Void) -> Timer {
        let (timer, replaced) = state.withLockedValue { state -> (Timer, Task<Void, Never>?) in
            let id = state.nextID
            state.nextID &+= 1
            state.actions[id] = action
            Self.push(Entry(deadline: deadline, id: id), into: &state.heap)
            let wake = wakeUp(for: deadline)
            if let wakeAt = state.wakeAt, wakeAt <= wake { return (Timer(id: id), nil) }
            return (Timer(id: id), startRunner(wakingAt: wake, &state))
        }
        replaced?.cancel()
        return timer
    }

    /// Waits until `delay` has passed on this queue's clock (a deadline in the heap, not a sleeping
    /// task); throws `CancellationError` when the task is cancelled first.
    package func wait(for delay: Duration) async throws {
        guard delay > .zero else { return }
        let done = OneShot<Void>()
        let timer = schedule(after: delay) { done.complete(.success(())) }
        try await withTaskCancellationHandler {
            try await done.value()
        } onCancel: {
            self.cancel(timer)
            done.complete(.failure(CancellationError()))
        }
    }

    /// Cancels a timer; returns whether it was still pending. Its action never runs after this returns
    /// true.
    @discardableResult
    package func cancel(_ timer: Timer) -> Bool {
        state.withLockedValue { state -> Bool in
            guard state.actions.removeValue(forKey: timer.id) != nil else { return false }
            // Cancelled entries are skipped when they surface; compact when they dominate.
            if state.heap.count > 64 && state.heap.count > 4 * state.actions.count {
                state.heap = state.heap.filter { state.actions[$0.id] != nil }
                Self.heapify(&state.heap)
            }
            return true
        }
    }

    /// Makes the task that sleeps until `deadline` (under the lock); returns the one it replaces.
    private func startRunner(wakingAt deadline: Duration, _ state: inout State) -> Task<Void, Never>? {
        let previous = state.runner
        state.generation += 1
        state.wakeAt = deadline
        let generation = state.generation
        // Unstructured on purpose: the queue belongs to a runtime (a value shared by many clients,
        // with no run() of its own), so no client's task group can own it; it ends as soon as no
        // deadline is pending.
        state.runner = Task.detached { await self.run(generation: generation) }  // no caller's task-locals (see ownTask)
        return previous
    }

    private func run(generation: Int) async {
        while true {
            guard let wakeAt = state.withLockedValue({ $0.generation == generation ? $0.wakeAt : nil }) else { return }
            do { try await timeline.sleep(until: wakeAt) } catch { return }
            let now = timeline.now
            let due = state.withLockedValue { state -> [@Sendable () -> Void]? in
                guard state.generation == generation else { return nil }
                var due: [@Sendable () -> Void] = []
                while let top = state.heap.first {
                    guard let action = state.actions[top.id] else {
                        Self.popFirst(&state.heap)
                        continue
                    }
                    guard top.deadline <= now else { break }
                    Self.popFirst(&state.heap)
                    state.actions.removeValue(forKey: top.id)
                    due.append(action)
                }
                state.wakeAt = state.heap.first.map { wakeUp(for: $0.deadline) }
                if state.wakeAt == nil { state.runner = nil }
                return due
            }
            guard let due else { return }
            for action in due { action() }
        }
    }

    // MARK: Heap

    private static func push(_ entry: Entry, into heap: inout [Entry]) {
        heap.append(entry)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child] < heap[parent] else { break }
            heap.swapAt(child, parent)
            child = parent
        }
    }

    private static func popFirst(_ heap: inout [Entry]) {
        guard !heap.isEmpty else { return }
        heap.swapAt(0, heap.count - 1)
        heap.removeLast()
        siftDown(&heap, from: 0)
    }

    private static func siftDown(_ heap: inout [Entry], from start: Int) {
        var parent = start
        while true {
            let left = 2 * parent + 1
            guard left < heap.count else { return }
            var smallest = left
            if left + 1 < heap.count, heap[left + 1] < heap[left] { smallest = left + 1 }
            guard heap[smallest] < heap[parent] else { return }
            heap.swapAt(parent, smallest)
            parent = smallest
        }
    }

    private static func heapify(_ heap: inout [Entry]) {
        guard heap.count > 1 else { return }
        for index in stride(from: heap.count / 2 - 1, through: 0, by: -1) { siftDown(&heap, from: index) }
    }
}
