import NIOConcurrencyHelpers
import RealtimeCore
import RealtimeTesting
import Testing

@Suite(.timeLimit(.minutes(1))) struct TimeoutSchedulerTests {
    /// A scheduler on a manual clock whose expired keys arrive on a stream.
    func make(_ clock: ManualClock) -> (TimeoutScheduler, AsyncStream<Int>.AsyncIterator) {
        let (stream, continuation) = AsyncStream.makeStream(of: Int.self)
        let scheduler = TimeoutScheduler(clock: clock) { continuation.yield($0) }
        return (scheduler, stream.makeAsyncIterator())
    }

    @Test func expiresOnlyPendingKeysInDeadlineOrderWithOneTimer() async throws {
        let clock = ManualClock()
        var (scheduler, expired) = make(clock)
        for key in 0..<100 {
            scheduler.schedule(key, after: .seconds(10) + .milliseconds(key))
        }
        try await clock.waitForSleepers(1)
        // One timer for a hundred timeouts: later deadlines never replace it.
        #expect(clock.sleeperCount == 1)
        for key in 0..<100 where key % 2 == 0 { #expect(scheduler.cancel(key)) }
        #expect(!scheduler.cancel(0), "a key is pending once")
        clock.advance(by: .seconds(9))
        #expect(scheduler.pendingCount == 50)
        clock.advance(by: .seconds(2))
        var seen: [Int] = []
        for _ in 0..<50 { seen.append(await expired.next()!) }
        #expect(seen == Array(stride(from: 1, to: 100, by: 2)))
        #expect(scheduler.pendingCount == 0)
    }

    @Test func anEarlierDeadlineReplacesTheTimer() async throws {
        let clock = ManualClock()
        var (scheduler, expired) = make(clock)
        scheduler.schedule(1, after: .seconds(10))
        try await clock.waitForSleepers(1)
        scheduler.schedule(2, after: .seconds(1))
        // The replaced timer is cancelled; one sleeper remains, for the earlier deadline.
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(1))
        #expect(await expired.next() == 2)
        #expect(scheduler.pendingCount == 1)
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(9))
        #expect(await expired.next() == 1)
    }

    @Test func reschedulingAKeyMovesItsDeadline() async throws {
        let clock = ManualClock()
        var (scheduler, expired) = make(clock)
        scheduler.schedule(7, after: .seconds(2))
        scheduler.schedule(8, after: .seconds(5))
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(1))
        scheduler.schedule(7, after: .seconds(10))  // now due at 11 s
        clock.advance(by: .seconds(1))
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(3))
        #expect(await expired.next() == 8)
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(6))
        #expect(await expired.next() == 7)
    }

    @Test func cancelAllPermanentlyStopsEverything() async throws {
        let clock = ManualClock()
        let fired = NIOLockedValueBox<[Int]>([])
        let scheduler = TimeoutScheduler(clock: clock) { key in fired.withLockedValue { $0.append(key) } }
        scheduler.schedule(1, after: .seconds(1))
        try await clock.waitForSleepers(1)
        scheduler.cancelAll(permanently: true)
        scheduler.schedule(2, after: .seconds(1))
        #expect(scheduler.pendingCount == 0)
        clock.advance(by: .seconds(5))
        // The timer task was cancelled: nobody sleeps on the clock any more.
        try await waitUntil { clock.sleeperCount == 0 }
        #expect(fired.withLockedValue { $0 }.isEmpty)
    }

    /// An answered request (scheduled, then cancelled before its deadline) touches no timer: one
    /// queue entry stays armed for the earliest deadline, and goes once nothing is pending.
    @Test func answeredRequestsLeaveOneArmedTimer() async throws {
        let clock = ManualClock()
        let queue = TimerQueue(clock: clock)
        let scheduler = TimeoutScheduler(timers: queue) { _ in }
        scheduler.schedule(-1, after: .seconds(10))
        for key in 0..<1000 {
            scheduler.schedule(key, after: .seconds(10))
            #expect(scheduler.cancel(key))
        }
        #expect(queue.pendingCount == 1)
        #expect(queue.heapCount == 1, "no entry was scheduled and cancelled per request")
        #expect(scheduler.cancel(-1))
        #expect(queue.pendingCount == 0, "nothing pending: the armed entry is cancelled")
    }

    /// The armed entry fires for the earliest deadline; the keys due then expire and the entry is
    /// armed again for the earliest deadline left, which was scheduled after the first.
    @Test func theArmedTimerMovesToTheEarliestDeadlineLeft() async throws {
        let clock = ManualClock()
        var (scheduler, expired) = make(clock)
        scheduler.schedule(1, after: .seconds(1))
        scheduler.schedule(2, after: .seconds(30))
        scheduler.schedule(3, after: .seconds(5))
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(1))
        #expect(await expired.next() == 1)
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(4))
        #expect(await expired.next() == 3)
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(25))
        #expect(await expired.next() == 2)
        #expect(scheduler.pendingCount == 0)
    }
}
