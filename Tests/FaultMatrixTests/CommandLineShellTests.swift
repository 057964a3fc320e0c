import Foundation
import RealtimeTesting
import Testing

/// The `realtime` command as a shell runs it: every subcommand ends soon after SIGINT or SIGTERM
/// with 128 + the signal, whatever it is waiting for; and a reader that closes standard output
/// (`| head -1`) ends it quietly with 141 (the status of a program ended by SIGPIPE), never a crash.
@Suite(.serialized, .timeLimit(.minutes(4)))
final class CommandLineShellTests {
    /// Each subcommand, connected to one of our servers and waiting there.
    static func subcommands() async throws -> (arguments: [[String]], stop: @Sendable () async -> Void) {
        let sse = try await SSETestServer.start()
        let socketIO = try await SocketIOTestServer.start()
        let signalR = try await SignalRTestServer.start()
        let spreadbot = try await SpreadbotTestServer.start()
        let webSocket = try await WebSocketEchoServer.start()
        let arguments = [
            ["demo"],
            ["ws", webSocket.webSocketBaseURL + "/"],
            ["sse", sse.url],
            ["socketio", socketIO.url],
            ["signalr", signalR.url],
            ["spreadbot", spreadbot.baseURL, "--path", "room", "--access-token", spreadbot.options.accessToken],
        ]
        return (arguments, {
            await sse.stop()
            await socketIO.stop()
            await signalR.stop()
            await spreadbot.stop()
            await webSocket.stop()
        })
    }

    @Test("SIGINT and SIGTERM end every subcommand with 130 and 143", arguments: [SIGINT, SIGTERM])
    func signals(_ signal: Int32) async throws {
        let (all, stop) = try await Self.subcommands()
        for arguments in all {
            var attempt = 0
            var command: RunningCommand
            var sent: ContinuousClock.Instant
            var status: Int32
            var stderr: String
            repeat {
                attempt += 1
                if arguments == ["demo"] {
                    // The demo runs its steps for about a second: signalled in the middle of them,
                    // by the thread that reads its output, once its first step's result is out (a
                    // task of this test was, on a loaded machine, late enough for three demos in a
                    // row to finish before the signal; a signal at its very first line could come
                    // before the command's signal sources were in place, and was lost).
                    command = try RealtimeCommandLine.launch(arguments, signal: (signal, afterLine: 2))
                    (status, stderr) = await command.wait()
                    sent = command.signalTime ?? .now
                    continue
                } else {
                    command = try RealtimeCommandLine.launch(arguments)
                    // The command connects and settles into waiting; nothing it prints marks that
                    // moment for every subcommand, so it gets a second.
                    try await Task.sleep(for: .seconds(1))
                    // On a loaded machine a second may not see the command started: a signal before
                    // it takes the signal over would end it by the default action (status 2 or 15).
                    try await waitUntil("\(arguments[0]) handles the signal", limit: .seconds(30)) { command.handles(signal) }
                }
                sent = ContinuousClock.now
                command.signal(signal)
                (status, stderr) = await command.wait()
                // Status 0 from the demo: it had finished all its steps before the signal came (the
                // machine stalled the reading thread). Run it again.
            } while arguments == ["demo"] && status == 0 && attempt < 3
            let took = (command.endTime ?? .now) - sent
            #expect(status == 128 + signal, "\(arguments[0]): status \(status), \(stderr)")
            // The command stops itself 0.8 s after the signal (measured alone: 0.80 s). In a full
            // run, beside other suites (the fault matrix's proxies and relays among them), seeing
            // the exit here has taken up to 16 s (the waiting thread's turn), so this bound only
            // tells a command that ends from one that does not.
            #expect(took < .seconds(30), "\(arguments[0]) took \(took) to end after signal \(signal)")
            #expect(!stderr.contains("Fatal error") && !stderr.contains("Illegal instruction"), "\(arguments[0]): \(stderr)")
        }
        await stop()
    }

    @Test("`| head -1`: the command ends quietly with 141 once its reader has gone")
    func closedStandardOutput() async throws {
        let sse = try await SSETestServer.start()
        // A stream that keeps writing, so the command writes again after head has gone: for as
        // long as the test may take (a count of 2,000 was over before a loaded full run's command
        // had connected, which then waited for an event that never came).
        let publisher = Task {
            var count = 0
            let end = ContinuousClock.now + .seconds(200)
            while !Task.isCancelled, ContinuousClock.now < end {
                sse.publish("tick \(count)")
                count += 1
                // A steady trickle, as a real stream: nothing to await but the pace.
                try? await Task.sleep(for: .milliseconds(5))
            }
        }
        defer { publisher.cancel() }
        for arguments in [["demo"], ["sse", sse.url]] {
            let script = #""$0" "$@" | head -1; exit "${PIPESTATUS[0]}""#
            let (status, stdout, stderr) = try await RealtimeCommandLine.run(
                executable: "/bin/bash", ["-c", script, RealtimeCommandLine.executable] + arguments)
            #expect(status == 141, "\(arguments[0]): status \(status), stderr \(stderr)")
            #expect(stdout.split(separator: "\n").count == 1, "\(arguments[0]): \(stdout)")
            #expect(stderr.isEmpty, "\(arguments[0]) ends quietly: \(stderr)")
        }
        publisher.cancel()
        await sse.stop()
    }
}
