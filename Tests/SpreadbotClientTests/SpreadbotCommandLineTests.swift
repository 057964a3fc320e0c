import Foundation
import RealtimeTesting
import Testing

/// `realtime spreadbot` against SpreadbotTestServer: messages on stdout (one JSON line each with
/// --json), the transport and failures on stderr, a non-zero exit on failure.
@Suite(.serialized, .timeLimit(.minutes(2)))
struct SpreadbotCommandLineTests {
    @Test func streamSendAndJSONLines() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        server.refuseWebSocket()
        // Publishes once the command's send arrived (so it is subscribed by then).
        let publisher = Task {
            try await waitUntil("the command's send arrived", limit: .seconds(60)) { !server.received(on: "room").isEmpty }
            server.publish("one", to: "room")
            server.publish("two", to: "room")
        }
        let result = try await RealtimeCommandLine.run([
            "spreadbot", server.baseURL, "--path", "room", "--send", "hi", "--count", "2", "--json", "--access-token", "access-0",
        ])
        try await publisher.value
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == """
            {"id":"1","event":"/room","text":"one","transport":"serverSentEvents"}
            {"id":"2","event":"/room","text":"two","transport":"serverSentEvents"}

            """)
        #expect(result.stderr.contains("connected over serverSentEvents"))
        #expect(server.received(on: "room") == [.text("hi")])
    }

    @Test func getPrintsTheBodyAndFailuresExitNonZero() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        server.setResource("/account", json: #"{"plan":"free"}"#)
        let got = try await RealtimeCommandLine.run(["spreadbot", server.baseURL, "--get", "account", "--access-token", "access-0"])
        #expect(got.status == 0, "\(got.stderr)")
        #expect(got.stdout == "{\"plan\":\"free\"}\n")
        let refused = try await RealtimeCommandLine.run(["spreadbot", server.baseURL, "--get", "account", "--access-token", "wrong"])
        #expect(refused.status != 0)
        #expect(refused.stderr.contains("authenticationFailed"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("wrong"), "the token leaked: \(refused.stderr)")
    }

    /// Into a pipe, every message line arrives as it is printed (nothing waits in a buffer), and
    /// SIGTERM ends the command with 143 after what it printed.
    @Test func linesReachAPipeAtOnceAndSIGTERMEndsTheCommand() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        let command = try RealtimeCommandLine.launch(["spreadbot", server.baseURL, "--path", "feed", "--access-token", "access-0"])
        var lines = command.lines.makeAsyncIterator()
        var seen: [String] = []
        for index in 1...3 {
            // Publishes until the command is subscribed and printed it: each line must come while
            // the command runs on (a block-buffered stdout would hold them all).
            let publisher = Task {
                while !Task.isCancelled {
                    server.publish("message \(index)", to: "feed")
                    try await Task.sleep(for: .milliseconds(200))  // a publisher's pace, until the command prints
                }
            }
            while let line = await lines.next() {
                seen.append(line)
                if line.hasSuffix("message \(index)") { break }
            }
            publisher.cancel()
        }
        #expect(seen.last?.hasSuffix("message 3") == true, "\(seen)")
        command.signal(SIGTERM)
        let (status, stderr) = await command.wait()
        #expect(status == 143, "\(stderr)")
    }

    /// --acknowledged sends over POST even on a WebSocket: the send returns once the server has it.
    @Test func acknowledgedSendsGoThroughPOST() async throws {
        let server = try await SpreadbotTestServer.start()
        defer { Task { await server.stop() } }
        let result = try await RealtimeCommandLine.run([
            "spreadbot", server.baseURL, "--path", "room", "--transport", "websocket", "--send", "a", "--send", "b",
            "--acknowledged", "--count", "0", "--access-token", "access-0",
        ])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(server.received(on: "room") == [.text("a"), .text("b")])
        #expect(server.requestLog.filter { $0 == "POST /room" }.count == 2, "each --send was a POST the server answered: \(server.requestLog)")
    }
}
