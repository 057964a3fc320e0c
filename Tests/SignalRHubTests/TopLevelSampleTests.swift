import RealtimeTesting
import Testing

/// The quick start as a top-level main.swift (Examples/SignalRQuickStart): `try await
/// connection.start()` there must be the async start (an older client's synchronous twin returned
/// before the connection was up, and the invoke after it failed with notConnected).
@Suite(.timeLimit(.minutes(1))) struct TopLevelSampleTests {
    @Test func startThenInvokeFromMainSwift() async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let (status, stdout, stderr) = try await RealtimeCommandLine.run(
            executable: RealtimeCommandLine.executable(named: "signalr-quickstart"), [server.url])
        #expect(status == 0, "\(stderr)")
        #expect(stdout.contains("add(1, 2) = 3"), "\(stdout)")
        #expect(stdout.hasSuffix("stopped\n"))
    }
}
