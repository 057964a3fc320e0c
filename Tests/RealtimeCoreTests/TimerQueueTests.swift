import NIOConcurrencyHelpers
import RealtimeCore
import RealtimeTesting
import Testing

@Suite(.timeLimit(.minutes(1))) struct TimerQueueTests {
    /// A queue on a manual clock whose fired labels arrive on a stream.
    func make(_ clock: ManualClock) -> (TimerQueue, @Sendable (Int) -> @Sendable () -> Void, AsyncStream<Int>.AsyncIterator) {
        let (stream, continuation) = AsyncStream.makeStream(of: Int.self)
        return (TimerQueue(clock: clock), { label in { continuation.yield(label) } }, stream.makeAsyncIterator())
    }

    @Test func aThousandDeadlinesShareOneSleeperAndFireInOrder() async throws {
        let clock = ManualClock()
        var (queue, fire, fired) = make(clock)
        // Scheduled latest first: every new deadline is earlier, so the sleeping task is replaced
        // each time, and still only one sleeps.
        for label in (0..<1000).reversed() { queue.schedule(after: .seconds(10) + .milliseconds(label), fire(label)) }
        try await clock.waitForSleepers(1)
        #expect(clock.sleeperCount == 1)
        #expect(queue.pendingCount == 1000)
        clock.advance(by: .seconds(12))
        var seen: [Int] = []
        for _ in 0..<1000 { seen.append(await fired.next()!) }
        #expect(seen == Array(0..<1000))
        #expect(queue.pendingCount == 0)
        // Nothing pending: no task sleeps.
        try await waitUntil { clock.sleeperCount == 0 }
    }

    @Test func cancelledTimersNeverFire() async throws {
        let clock = ManualClock()
        var (queue, fire, fired) = make(clock)
        let timers = (0..<10).map { label in queue.schedule(after: .seconds(label + 1), fire(label)) }
        for (label, timer) in timers.enumerated() where label % 2 == 0 { #expect(queue.cancel(timer)) }
        #expect(!queue.cancel(timers[0]), "a timer is cancelled once")
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(10))
        var seen: [Int] = []
        for _ in 0..<5 { seen.append(await fired.next()!) }
        #expect(seen == [1, 3, 5, 7, 9])
        #expect(!queue.cancel(timers[1]), "a timer that fired is no longer pending")
    }

    @Test func anEarlierDeadlineWakesSooner() async throws {
        let clock = ManualClock()
        var (queue, fire, fired) = make(clock)
        queue.schedule(after: .seconds(60), fire(60))
        try await clock.waitForSleepers(1)
        queue.schedule(after: .seconds(1), fire(1))
        try await waitUntil { clock.sleeps.last == .seconds(1) }
        clock.advance(by: .seconds(1))
        #expect(await fired.next() == 1)
        #expect(queue.pendingCount == 1)
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(59))
        #expect(await fired.next() == 60)
    }

    @Test func aPastDeadlineFiresAtOnce() async throws {
        let clock = ManualClock()
        var (queue, fire, fired) = make(clock)
        clock.advance(by: .seconds(5))
        queue.schedule(at: .zero, fire(7))
        #expect(await fired.next() == 7)
    }

    /// Many cancelled deadlines do not pile up: the heap is compacted once they dominate.
    @Test func churnKeepsTheQueueSmall() async throws {
        let clock = ManualClock()
        let (queue, fire, _) = make(clock)
        for round in 0..<10_000 {
            let timer = queue.schedule(after: .seconds(30), fire(round))
            queue.cancel(timer)
        }
        #expect(queue.pendingCount == 0)
        #expect(queue.heapCount <= 256)
    }

    /// On a real clock deadlines share wake-ups: the runner wakes at the end of each 10 ms cell of
    /// the timeline and runs what fell in it; a deadline is never run early.
    @Test func slackGathersDeadlinesIntoOneWakeUpAndNeverRunsEarly() async throws {
        let clock = ManualClock()
        let (stream, continuation) = AsyncStream.makeStream(of: (label: Int, at: Duration).self)
        let queue = TimerQueue(clock: clock, slack: .milliseconds(10))
        var fired = stream.makeAsyncIterator()
        for (label, milliseconds) in [(0, 1), (1, 3), (2, 9), (3, 12)] {
            queue.schedule(after: .milliseconds(milliseconds)) { continuation.yield((label, queue.now)) }
        }
        try await clock.waitForSleepers(1)
        #expect(clock.sleeps.last == .milliseconds(10), "one sleep, to the end of the first cell")
        clock.advance(by: .milliseconds(9))
        #expect(clock.sleeperCount == 1, "at 9 ms nothing ran: the runner still sleeps")
        clock.advance(by: .milliseconds(1))
        for expected in 0..<3 {
            let event = await fired.next()
            #expect(event?.label == expected)
            #expect(event?.at == .milliseconds(10))
        }
        try await clock.waitForSleepers(1)
        #expect(clock.sleeps.count == 2, "the three deadlines of the first cell took one wake-up")
        #expect(clock.sleeps.last == .milliseconds(10), "then to the end of the next cell, 20 ms")
        clock.advance(by: .milliseconds(10))
        let last = await fired.next()
        #expect(last?.label == 3)
        #expect(last?.at == .milliseconds(20))
    }

    @Test func realClocksGetTenMillisecondsOfSlackAndManualClocksNone() {
        #expect(TimerQueue(clock: ContinuousClock()).slack == .milliseconds(10))
        #expect(TimerQueue(clock: SuspendingClock()).slack == .milliseconds(10))
        #expect(TimerQueue(clock: ManualClock()).slack == .zero)
    }
}
