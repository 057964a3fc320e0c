import Foundation
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
}
