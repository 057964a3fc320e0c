import Foundation
import MetricsTestKit
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing

/// Keep-alive and server timeout of a real connection, driven by a ManualClock in the runtime: no
/// test waits 15 or 30 seconds.
@Suite("Keep-alive and server timeout on the manual clock", .serialized, .timeLimit(.minutes(3)))
struct HubTimersOnManualClockTests {
    @Test("A silent client sends a Ping every keep-alive interval; a silent server is a timeout after serverTimeout")
    func timers() async throws {
        var options = SignalRTestServer.Options()
        options.keepAliveInterval = nil  // the server stays silent: only the client's timers act
        let server = try await SignalRTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let clock = ManualClock()
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets)
            .withRuntime(RealtimeRuntime(clock: clock)).build()
        let closed = Recorder<String>()
        connection.onClosed { error in closed.append((error as? RealtimeError)?.code.description ?? "nil") }
        try await connection.start()
        try await clock.waitForSleepers()
        #expect(server.pingsReceived == 0)

        clock.advance(by: .seconds(14))
        // A Ping sent too early would reach the server within this moment; its absence is sampled.
        try await Task.sleep(for: .milliseconds(100))
        #expect(server.pingsReceived == 0, "nothing before 15 s")
        clock.advance(by: .seconds(1))
        try await waitUntil { server.pingsReceived == 1 }
        try await clock.waitForSleepers()
        clock.advance(by: .seconds(14))
        // A Ping sent too early would reach the server within this moment; its absence is sampled.
        try await Task.sleep(for: .milliseconds(100))
        #expect(server.pingsReceived == 1)
        #expect(connection.currentState == .connected, "29 s of silence from the server is still alive")

        clock.advance(by: .seconds(1))
        #expect(try await closed.wait(count: 1) == ["timeout"])
        #expect(connection.currentState == .stopped)
    }

    /// A connection made long after its runtime (a shared runtime, a second connection an hour
    /// later) keeps its deadlines on the runtime's timeline. They used to be offsets from the
    /// connection's own start, read by the runtime's timer queue as offsets from the queue's start:
    /// every keep-alive deadline was due at once, the check found it early and armed it again, and
    /// the timer queue spun (10,000 idle connections took a whole core).
    @Test("A connection made after its runtime's clock moved on sleeps until its keep-alive, then pings once")
    func aConnectionMadeLaterKeepsTheRuntimesTimeline() async throws {
        var options = SignalRTestServer.Options()
        options.keepAliveInterval = nil
        let server = try await SignalRTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let clock = ManualClock()
        let runtime = RealtimeRuntime(clock: clock)
        // The runtime's timer queue exists and its clock moves on before the connection is made.
        _ = runtime.timers.schedule(after: .seconds(1)) {}
        clock.advance(by: .seconds(3_600))
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets).withRuntime(runtime).build()
        try await connection.start()
        // The timer queue sleeps until the keep-alive deadline instead of firing it again and again.
        try await clock.waitForSleepers()
        let sleepsAfterStart = clock.sleeps.count
        #expect(clock.sleeps.last == .seconds(15), "the queue sleeps until the first keep-alive: \(clock.sleeps.suffix(3))")
        #expect(server.pingsReceived == 0)
        clock.advance(by: .seconds(15))
        try await waitUntil("the keep-alive Ping") { server.pingsReceived == 1 }
        try await clock.waitForSleepers()
        #expect(clock.sleeps.count <= sleepsAfterStart + 2, "one wake for the Ping, not a spin: \(clock.sleeps.count - sleepsAfterStart) sleeps")
        await connection.stop()
    }

    /// The server's Pings are consumed on the event loop (they never reach the reader task), and
    /// still count as heard: 40 s of the client's clock with a Ping heard every 10 s is no timeout.
    @Test("The server's Pings keep a connection alive past serverTimeout")
    func serverPingsAreHeard() async throws {
        var options = SignalRTestServer.Options()
        options.keepAliveInterval = .milliseconds(100)  // real time: the server's clock is its own
        let server = try await SignalRTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let clock = ManualClock()
        let metrics = TestMetrics()
        let probe = MetricsProbe(metrics, protocol: "signalr")
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets)
            .withRuntime(RealtimeRuntime(clock: clock, metricsFactory: metrics)).build()
        let closed = Recorder<String>()
        connection.onClosed { error in closed.append((error as? RealtimeError)?.code.description ?? "nil") }
        try await connection.start()
        try await clock.waitForSleepers()
        for step in 1...4 {
            let heard = probe.counter(ClientMetrics.messagesReceivedLabel)
            try await waitUntil("a Ping from the server, heard") { probe.counter(ClientMetrics.messagesReceivedLabel) > heard }
            clock.advance(by: .seconds(10))
            // The timer queue ran what came due and sleeps again (or the connection closed).
            try await waitUntil("the timers ran at \(step * 10) s") { clock.sleeperCount >= 1 || !closed.values.isEmpty }
        }
        #expect(closed.values.isEmpty, "no timeout: \(closed.values)")
        let sum: Int = try await connection.invoke(method: "add", arguments: 2, 3)
        #expect(sum == 5)
        #expect(connection.currentState == .connected)
        await connection.stop()
    }

    /// The retry policy's delays are deadlines on the runtime's clock (the reconnect driver's), and
    /// a reconnected connection that drops at once continues the reconnect it came from.
    @Test("A reconnect waits the retry policy's delay on the runtime's clock; stop() during the wait drops it")
    func reconnectDelays() async throws {
        var options = SignalRTestServer.Options()
        options.keepAliveInterval = nil
        let server = try await SignalRTestServer.start(options: options)
        defer { Task { await server.stop() } }
        let clock = ManualClock()
        let runtime = RealtimeRuntime(clock: clock)
        let connection = HubConnectionBuilder().withUrl(url: server.url, transport: .webSockets)
            .withAutomaticReconnect([10, 20]).withRuntime(runtime).build()
        let events = Recorder<String>()
        connection.onReconnecting { _ in events.append("reconnecting") }
        connection.onReconnected { events.append("reconnected") }
        connection.onClosed { error in events.append("closed \((error as? RealtimeError)?.code.description ?? "nil")") }
        try await connection.start()
        #expect(server.negotiateCount == 1)
        #expect(connection.connectionState.current == .connected)

        /// Drops the connection, waits for `onReconnecting` (the `count`-th event) and the retry
        /// deadline (the only timer left), then moves the clock `by` and samples: an attempt made
        /// too early would reach the server within 150 ms.
        func dropAndAdvance(events count: Int, by duration: Duration) async throws {
            await server.dropAll()
            _ = try await events.wait(count: count)
            try await waitUntil("the retry deadline armed") { runtime.timers.pendingCount == 1 }
            try await clock.waitForSleepers()
            clock.advance(by: duration)
            // An attempt made too early would reach the server within this moment; its absence is sampled.
            try await Task.sleep(for: .milliseconds(150))
        }
        try await dropAndAdvance(events: 1, by: .milliseconds(9_900))
        #expect(server.negotiateCount == 1, "no attempt before the policy's 10 s")
        #expect(connection.currentState == .reconnecting)
        #expect(connection.connectionState.current == .reconnecting(attempt: 1))
        clock.advance(by: .milliseconds(100))
        #expect(try await events.wait(count: 2) == ["reconnecting", "reconnected"])
        #expect(server.negotiateCount == 2)

        // Dropped again at once: the same reconnect goes on with the policy's second delay.
        try await dropAndAdvance(events: 3, by: .seconds(19))
        #expect(server.negotiateCount == 2, "the second delay (20 s) applies: the reconnect continued")
        #expect(connection.connectionState.current == .reconnecting(attempt: 2))
        await connection.stop()
        #expect(events.all == ["reconnecting", "reconnected", "reconnecting", "closed nil"])
        #expect(runtime.timers.pendingCount == 0, "the stop dropped the retry deadline")
        clock.advance(by: .seconds(60))
        // A connect after stop() would reach the server within this moment; its absence is sampled.
        try await Task.sleep(for: .milliseconds(150))
        #expect(server.negotiateCount == 2, "nothing connects after stop()")
        #expect(connection.currentState == .stopped)
        #expect(connection.connectionState.current == .disconnected(nil))
    }
}
