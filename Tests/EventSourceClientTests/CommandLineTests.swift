import Foundation
import RealtimeTesting
import Testing

/// The `realtime` command exits non-zero with the error on stderr when a connection fails for good.
@Suite(.serialized, .timeLimit(.minutes(1))) struct CommandLineTests {
    static var executable: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent(".build/debug/realtime").path
    }

    func run(_ arguments: [String]) async throws -> (status: Int32, stderr: String) {
        guard FileManager.default.isExecutableFile(atPath: Self.executable) else {
            throw TestFailure("\(Self.executable) is missing: `swift build` builds it (Scripts/test.sh does)")
        }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        process.arguments = arguments
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        // Read on a thread of its own: blocking a thread that runs tasks (a Dispatch global queue's
        // included, on Linux) would starve the in-process server the command talks to.
        let data = await BlockingWork.run {
            let data = errors.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return data
        }
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
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
