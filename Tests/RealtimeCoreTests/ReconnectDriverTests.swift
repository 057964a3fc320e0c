import MetricsTestKit
import NIOConcurrencyHelpers
@testable import RealtimeCore
import RealtimeTesting
import Testing

@Suite(.timeLimit(.minutes(1))) struct ReconnectDriverTests {
    func runtime(_ clock: ManualClock) -> RealtimeRuntime { RealtimeRuntime(clock: clock) }

    @Test func reconnectsWithBackoffAndFlushesTheQueueInOrder() async throws {
        let clock = ManualClock()
        let reachability = ManualReachability(reachable: true)
        let driver = ReconnectDriver<String>(
            policy: ReconnectPolicy(backoff: .exponential(initial: .seconds(1), maximum: .seconds(10), randomizationFactor: 0), reachability: reachability),
            runtime: runtime(clock))
        let attempts = NIOLockedValueBox(0)
        let delivered = NIOLockedValueBox<[String]>([])
        let connected = AsyncStream<Void>.makeStream()
        let run = Task {
            await driver.run { context in
                let attempt = attempts.withLockedValue { $0 += 1; return $0 }
                if attempt < 3 { throw RealtimeError(.connectFailed, "refused") }
                try await context.connected { message in delivered.withLockedValue { $0.append(message) } }
                connected.continuation.yield()
                try await Task.sleep(for: .seconds(3600))  // stays connected until the test cancels it
                return .closed
            }
        }
        // Sent while not connected: queued.
        try await driver.send("one")
        try await driver.send("two")
        try await clock.waitForSleepers(1)
        #expect(driver.state.current == .reconnecting(attempt: 1))
        clock.advance(by: .seconds(1))
        try await clock.waitForSleepers(1)
        #expect(driver.state.current == .reconnecting(attempt: 2))
        clock.advance(by: .seconds(2))
        var iterator = connected.stream.makeAsyncIterator()
        await iterator.next()
        #expect(driver.state.current == .connected)
        try await driver.send("three")
        #expect(delivered.withLockedValue { $0 } == ["one", "two", "three"])
        #expect(clock.sleeps == [.seconds(1), .seconds(2)])
        run.cancel()
        #expect(await run.value == nil)
        #expect(driver.state.current == .disconnected(nil))
        await #expect(throws: RealtimeError.self) { try await driver.send("after stop") }
    }

    @Test func givesUpAfterTheFixedListWithATypedError() async throws {
        let clock = ManualClock()
        let driver = ReconnectDriver<String>(
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
        let driver = ReconnectDriver<String>(policy: ReconnectPolicy(reachability: AlwaysReachable()))
        let error = await driver.run { _ in throw RealtimeError(.certificatePinMismatch, "pin") }
        #expect(error?.code == .certificatePinMismatch)
    }

    @Test func waitsForReachabilityBeforeSleeping() async throws {
        let clock = ManualClock()
        let reachability = ManualReachability(reachable: false)
        let driver = ReconnectDriver<String>(
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

    @Test func fullQueueRejectsWithATypedErrorAndDropOldestReports() async throws {
        let rejecting = ReconnectDriver<Int>(policy: .disabled, queue: OfflineQueue(capacity: 1))
        try await rejecting.send(1)
        let error = await #expect(throws: RealtimeError.self) { try await rejecting.send(2) }
        #expect(error?.code == .queueFull)
        #expect(rejecting.queuedCount == 1)

        let dropped = NIOLockedValueBox<[Int]>([])
        let dropping = ReconnectDriver<Int>(
            policy: .disabled, queue: OfflineQueue(capacity: 1, overflowPolicy: .dropOldest),
            onOverflowDrop: { value in dropped.withLockedValue { $0.append(value) } })
        try await dropping.send(1)
        try await dropping.send(2)
        #expect(dropped.withLockedValue { $0 } == [1])
        #expect(dropping.drainQueue() == [2])
    }

    @Test func aSendThatFailsOnTheWireIsKeptForTheNextConnection() async throws {
        let driver = ReconnectDriver<String>(policy: ReconnectPolicy(backoff: .fixed([.zero]), reachability: AlwaysReachable()))
        let delivered = NIOLockedValueBox<[String]>([])
        let sessions = NIOLockedValueBox(0)
        let gate = AsyncStream<Void>.makeStream()
        let run = Task {
            await driver.run { context in
                let session = sessions.withLockedValue { $0 += 1; return $0 }
                if session == 1 {
                    try await context.connected { _ in throw RealtimeError(.connectionClosed, "socket died") }
                    gate.continuation.yield()
                    try await Task.sleep(for: .seconds(3600))  // a session that never ends by itself
                    return .closed
                }
                try await context.connected { message in delivered.withLockedValue { $0.append(message) } }
                return .closed
            }
        }
        var iterator = gate.stream.makeAsyncIterator()
        await iterator.next()
        try await driver.send("precious")
        #expect(driver.queuedCount == 1)
        run.cancel()
        _ = await run.value
        // A new run (same driver) delivers it.
        let second = await driver.run { context in
            try await context.connected { message in delivered.withLockedValue { $0.append(message) } }
            return .closed
        }
        #expect(second == nil)
        #expect(delivered.withLockedValue { $0 } == ["precious"])
    }

    /// A client that stops while connected cancels the session: the open-connections meter drops
    /// then too. It stayed at 1 when the stop came as a cancellation (a Socket.IO disconnect under
    /// load), not as the session's own end.
    @Test func aCancelledConnectedSessionIsCountedClosed() async throws {
        let metrics = TestMetrics()
        let runtime = RealtimeRuntime(clock: ManualClock(), metricsFactory: metrics)
        let probe = MetricsProbe(metrics, protocol: "test")
        let driver = ReconnectDriver<String>(policy: ReconnectPolicy(backoff: .fixed([.zero]), reachability: AlwaysReachable()), runtime: runtime)
        driver.report(to: ClientMetrics(protocol: "test", client: "default", runtime: runtime))
        let connected = AsyncStream<Void>.makeStream()
        let run = Task {
            await driver.run { context in
                try await context.connected { _ in }
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
