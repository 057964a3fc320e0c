import MetricsTestKit
import NIOConcurrencyHelpers
@testable import RealtimeCore
import RealtimeTesting
import Testing

@Suite(.timeLimit(.minutes(1))) struct ReconnectDriverTests {
    func runtime(_ clock: ManualClock) -> RealtimeRuntime { RealtimeRuntime(clock: clock) }

    @Test func reconnectsWithBackoff() async throws {
        let clock = ManualClock()
        let reachability = ManualReachability(reachable: true)
        let driver = ReconnectDriver(
            policy: ReconnectPolicy(backoff: .exponential(initial: .seconds(1), maximum: .seconds(10), randomizationFactor: 0), reachability: reachability),
            runtime: runtime(clock))
        let attempts = NIOLockedValueBox(0)
        let connected = AsyncStream<Void>.makeStream()
        let run = Task {
            await driver.run { context in
                let attempt = attempts.withLockedValue { $0 += 1; return $0 }
                if attempt < 3 { throw RealtimeError(.connectFailed, "refused") }
                context.connected()
                connected.continuation.yield()
                try await Task.sleep(for: .seconds(3600))  // stays connected until the test cancels it
                return .closed
            }
        }
        try await clock.waitForSleepers(1)
        #expect(driver.state.current == .reconnecting(attempt: 1))
        clock.advance(by: .seconds(1))
        try await clock.waitForSleepers(1)
        #expect(driver.state.current == .reconnecting(attempt: 2))
        clock.advance(by: .seconds(2))
        var iterator = connected.stream.makeAsyncIterator()
        await iterator.next()
        #expect(driver.state.current == .connected)
        #expect(attempts.withLockedValue { $0 } == 3)
        #expect(clock.sleeps == [.seconds(1), .seconds(2)])
        run.cancel()
        #expect(await run.value == nil)
        #expect(driver.state.current == .disconnected(nil))
    }

    @Test func givesUpAfterTheFixedListWithATypedError() async throws {
        let clock = ManualClock()
        let driver = ReconnectDriver(
            policy: ReconnectPolicy(backoff: .fixed([.zero, .seconds(2)]), reachability: AlwaysReachable()),
            runtime: runtime(clock))
        let run = Task { await driver.run { _ in throw RealtimeError(.connectFailed, "refused") } }
        try await clock.waitForSleepers(1)  // attempt 2 waits 2 s (attempt 1 waited zero)
        clock.advance(by: .seconds(2))
        let error = await run.value
        #expect(error?.code == .reconnectGaveUp)
        #expect(driver.state.current == .disconnected(error))
    }

    @Test func nonRetryableErrorsStopAtOnce() async {
        let driver = ReconnectDriver(policy: ReconnectPolicy(reachability: AlwaysReachable()))
        let error = await driver.run { _ in throw RealtimeError(.certificatePinMismatch, "pin") }
        #expect(error?.code == .certificatePinMismatch)
    }

    @Test func waitsForReachabilityBeforeSleeping() async throws {
        let clock = ManualClock()
        let reachability = ManualReachability(reachable: false)
        let driver = ReconnectDriver(
            policy: ReconnectPolicy(backoff: .fixed([.seconds(1)]), reachability: reachability), runtime: runtime(clock))
        let sessions = NIOLockedValueBox(0)
        let run = Task {
            await driver.run { _ in
                let count = sessions.withLockedValue { $0 += 1; return $0 }
                if count == 1 { return .dropped(RealtimeError(.connectionClosed, "dropped")) }
                return .closed
            }
        }
        while reachability.checkCount == 0 { await Task.yield() }
        #expect(clock.sleeperCount == 0)
        #expect(sessions.withLockedValue { $0 } == 1)
        reachability.set(reachable: true)
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(1))
        #expect(await run.value == nil)
        #expect(sessions.withLockedValue { $0 } == 2)
    }

    func recordingCallbacks(_ events: Recorder<String>) -> @Sendable (ReconnectDriver.Event) -> Void {
        { event in
            switch event {
            case .connect(let attempt): events.append("connect \(attempt)")
            case .failed(let error, let willRetry): events.append("report \(error.code) \(willRetry)")
            case .finished(let error): events.append("finished \(error.map { "\($0.code)" } ?? "nil")")
            }
        }
    }

    /// Driven from callbacks (EventSource): the same rules, the retry delay a deadline on the
    /// runtime's timer queue, and a restart while waiting connects at once.
    @Test func drivenFromCallbacksRetriesOnADeadline() async throws {
        let clock = ManualClock()
        let driver = ReconnectDriver(
            policy: ReconnectPolicy(backoff: .exponential(initial: .seconds(1), maximum: .seconds(10), randomizationFactor: 0), reachability: AlwaysReachable()),
            runtime: runtime(clock))
        let events = Recorder<String>()
        let timers = driver.runtimeForTests.timers
        driver.start(recordingCallbacks(events))
        #expect(events.all == ["connect 0"])
        #expect(driver.state.current == .connecting)
        driver.ended(.dropped(RealtimeError(.connectFailed, "refused")))
        #expect(events.all == ["connect 0", "report connectFailed true"])
        #expect(driver.state.current == .reconnecting(attempt: 1))
        // The retry is a deadline: nothing connects until the clock reaches it.
        try await clock.waitForSleepers(1)
        clock.advance(by: .milliseconds(999))
        #expect(events.all.count == 2)
        clock.advance(by: .milliseconds(1))
        #expect(try await events.wait(count: 3).last == "connect 1")
        driver.opened()
        #expect(driver.state.current == .connected)
        // Dropped before it proved stable: the count goes on (attempt 2, a 2 s delay).
        driver.ended(.dropped(RealtimeError(.connectionClosed, "dropped")))
        #expect(driver.state.current == .reconnecting(attempt: 2))
        // Nothing to wait for with AlwaysReachable: the deadline is armed as the drop is told.
        #expect(timers.pendingCount == 1)
        // A restart while waiting: at once, and the pending deadline is dropped.
        driver.restartNow()
        #expect(events.all.last == "connect 0")
        #expect(timers.pendingCount == 0)
        driver.opened()
        driver.stop()
        #expect(events.all.last == "finished nil")
        #expect(driver.state.current == .disconnected(nil))
    }

    @Test func drivenFromCallbacksStopDropsThePendingRetryAndGivingUpIsReported() async throws {
        let clock = ManualClock()
        let driver = ReconnectDriver(
            policy: ReconnectPolicy(backoff: .fixed([.seconds(1)]), reachability: AlwaysReachable()), runtime: runtime(clock))
        let events = Recorder<String>()
        driver.start(recordingCallbacks(events))
        driver.ended(.dropped(RealtimeError(.connectFailed, "refused")))
        #expect(driver.runtimeForTests.timers.pendingCount == 1, "the retry's deadline is armed")
        driver.stop()
        #expect(events.all == ["connect 0", "report connectFailed true", "finished nil"])
        #expect(driver.runtimeForTests.timers.pendingCount == 0, "the retry was dropped with the stop")

        // The fixed list used up: the failure is reported once, then the typed end.
        let gaveUp = ReconnectDriver(
            policy: ReconnectPolicy(backoff: .fixed([]), reachability: AlwaysReachable()), runtime: runtime(clock))
        let ends = Recorder<String>()
        gaveUp.start(recordingCallbacks(ends))
        gaveUp.ended(.dropped(RealtimeError(.connectFailed, "refused")))
        #expect(ends.all == ["connect 0", "report connectFailed false", "finished reconnectGaveUp"])
    }

    /// Driven from callbacks with a network that is down: no deadline until the reachability check
    /// says the network is up (a short task), and a stop while waiting for it ends the wait.
    @Test func drivenFromCallbacksWaitsForTheNetworkFirst() async throws {
        let clock = ManualClock()
        let reachability = ManualReachability(reachable: false)
        let driver = ReconnectDriver(
            policy: ReconnectPolicy(backoff: .fixed([.seconds(1), .seconds(1)]), reachability: reachability), runtime: runtime(clock))
        let timers = driver.runtimeForTests.timers
        let events = Recorder<String>()
        driver.start(recordingCallbacks(events))
        driver.ended(.dropped(RealtimeError(.connectFailed, "refused")))
        try await waitUntil("the reachability check ran") { reachability.checkCount >= 1 }
        #expect(timers.pendingCount == 0, "no retry deadline while the network is down")
        #expect(driver.phase == .waitingForNetwork(attempt: 1))
        reachability.set(reachable: true)
        try await waitUntil("the retry's deadline is armed") { timers.pendingCount == 1 }
        #expect(driver.phase == .waitingToRetry(attempt: 1))
        try await clock.waitForSleepers(1)
        clock.advance(by: .seconds(1))
        #expect(try await events.wait(count: 3).last == "connect 1")

        reachability.set(reachable: false)
        driver.ended(.dropped(RealtimeError(.connectFailed, "refused")))
        try await waitUntil("the second reachability check ran") { reachability.checkCount >= 2 }
        driver.stop()
        reachability.set(reachable: true)
        // A connect after the stop would be told within this moment; its absence is sampled.
        try await Task.sleep(for: .milliseconds(100))
        #expect(events.all.suffix(2) == ["report connectFailed true", "finished nil"])
        #expect(timers.pendingCount == 0)
    }

    /// A client that stops while connected cancels the session: the open-connections meter drops
    /// then too. It stayed at 1 when the stop came as a cancellation (a Socket.IO disconnect under
    /// load), not as the session's own end.
    @Test func aCancelledConnectedSessionIsCountedClosed() async throws {
        let metrics = TestMetrics()
        let runtime = RealtimeRuntime(clock: ManualClock(), metricsFactory: metrics)
        let probe = MetricsProbe(metrics, protocol: "test")
        let driver = ReconnectDriver(policy: ReconnectPolicy(backoff: .fixed([.zero]), reachability: AlwaysReachable()), runtime: runtime)
        driver.report(to: ClientMetrics(protocol: "test", client: "default", runtime: runtime))
        let connected = AsyncStream<Void>.makeStream()
        let run = Task {
            await driver.run { context in
                context.connected()
                connected.continuation.yield()
                try await Task.sleep(for: .seconds(3600))  // connected until the test cancels the run
                return .closed
            }
        }
        var iterator = connected.stream.makeAsyncIterator()
        await iterator.next()
        #expect(probe.meter(ClientMetrics.connectionsOpenLabel) == 1)
        run.cancel()
        #expect(await run.value == nil)
        #expect(probe.meter(ClientMetrics.connectionsOpenLabel) == 0)
    }
}
