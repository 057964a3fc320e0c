import Foundation
import RealtimeCore
import RealtimeTesting
import SignalRHub
import Testing

/// Clients written by others against our SignalRTestServer: pysignalr 1.3.3 and signalrcore
/// 1.0.2, over WebSockets with JSON and MessagePack. Each script prints OK/FAIL per scenario.
@Suite("Python SignalR clients against SignalRTestServer", .serialized, .timeLimit(.minutes(3)))
struct PythonClientsTests {
    static let cases: [(String, String)] = [
        ("pysignalr_client.py", "json"), ("pysignalr_client.py", "messagepack"),
        ("signalrcore_client.py", "json"), ("signalrcore_client.py", "messagepack"),
    ]

    @Test("Every scenario passes", arguments: cases)
    func scenarios(_ script: String, _ kind: String) async throws {
        let server = try await SignalRTestServer.start()
        defer { Task { await server.stop() } }
        let client = try await PythonPeer.start(scriptPath: signalRPeerScript(script), arguments: [server.url, kind], waitForPort: false)
        let (output, status) = await client.waitForExit(limit: .seconds(90))
        let lines = output.split(separator: "\n").map(String.init)
        #expect(status == 0, "\(script) \(kind):\n\(output)")
        #expect(lines.contains("DONE"), "\(output)")
        #expect(!lines.contains { $0.hasPrefix("FAIL") }, "\(output)")
        #expect(lines.filter { $0.hasPrefix("OK ") }.count >= 5, "\(output)")
    }
}
