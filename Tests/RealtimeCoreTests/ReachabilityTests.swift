@testable import RealtimeCore
import RealtimeTesting
import Testing

/// The operating system's answers as `PollingReachability` reads them, on this machine's loopback.
@Suite(.timeLimit(.minutes(1))) struct ReachabilityTests {
    /// Every machine has loopback up with 127.0.0.1: read wrongly (the address family's bytes),
    /// no interface would count.
    @Test func loopbackCountsWhenAccepted() async {
        #expect(PollingReachability.hasUsableInterface(acceptLoopback: true))
        #expect(await PollingReachability(acceptLoopback: true).isReachable())
    }

    @Test func theProbeConnectsOrIsRefused() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let refusing = try RefusingPort()
        defer { refusing.release() }
        #expect(await PollingReachability(probe: ("127.0.0.1", server.port)).isReachable())
        #expect(await PollingReachability(probe: ("127.0.0.1", refusing.port)).isReachable() == false)
    }
}
