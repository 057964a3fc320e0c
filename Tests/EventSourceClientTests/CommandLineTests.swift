import Foundation
import RealtimeTesting
import Testing

/// The `realtime` command exits non-zero with the error on stderr when a connection fails for good.
@Suite(.serialized, .timeLimit(.minutes(1))) struct CommandLineTests {
    func run(_ arguments: [String]) async throws -> (status: Int32, stderr: String) {
        let (status, _, stderr) = try await RealtimeCommandLine.run(arguments)
        return (status, stderr)
    }

    @Test func socketioReportsARefusedUpgradeAndExitsNonZero() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        server.route("/socket.io/") { _ in .text("no sockets here", status: 403) }
        let (status, stderr) = try await run(["socketio", server.baseURL, "--transport", "websocket", "--reconnect-attempts", "1"])
        #expect(status == 1)
        #expect(stderr.contains("HTTP 403"), "\(stderr)")
        #expect(stderr.contains("reconnectGaveUp"), "\(stderr)")
    }

    @Test func sseReportsABadStatusAndExitsNonZero() async throws {
        let server = try await ScriptedHTTPServer.start()
        defer { Task { await server.stop() } }
        let (status, stderr) = try await run(["sse", server.baseURL + "/missing"])
        #expect(status == 1)
        #expect(stderr.contains("failed for good"), "\(stderr)")
        #expect(stderr.contains("HTTP 404"), "\(stderr)")
    }
}
