import Foundation
import RealtimeTesting
import SocketIOEngine
import Testing

/// python-socketio 5.18.1's AsyncClient (code we did not write) against our in-process
/// `SocketIOTestServer`: the server is checked by a reference client, over each transport setup.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct PythonClientAgainstTestServerTests {
    @Test(arguments: ["polling", "websocket", "polling,websocket"])
    func referenceClientScenarios(transports: String) async throws {
        let server = try await SocketIOTestServer.start()
        let client = try await PythonPeer.start(scriptPath: peerScript("sio_client.py"), arguments: [server.url, transports], waitForPort: false)
        let (output, status) = await client.waitForExit(limit: .seconds(60))
        await server.stop()
        let lines = output.split(separator: "\n").map(String.init)
        for failure in lines where failure.hasPrefix("FAIL") {
            Issue.record("python-socketio AsyncClient: \(failure)")
        }
        #expect(lines.last == "DONE", "the client did not finish: \(output)")
        #expect(status == 0)
        var expected = ["OK connect and welcome", "OK ack with binary in nested position", "OK event with binary from the server",
            "OK server asks the client with an ack", "OK emits", "OK server-initiated disconnect",
            "OK namespace with auth accepted", "OK namespace with auth refused"]
        if transports == "polling,websocket" { expected.append("OK upgrade to websocket") }
        #expect(Set(lines.filter { $0.hasPrefix("OK") }) == Set(expected))
        #expect(server.recorded == [[1], [2], [3]])
    }
}
