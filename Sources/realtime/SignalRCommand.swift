import ArgumentParser
import Foundation
import RealtimeCore
import SignalRHub

struct SignalRCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "signalr",
        abstract: "Connect to a SignalR hub: invoke a method, read a stream, or print the invocations of client methods.",
        discussion: """
            Examples:
              realtime signalr http://localhost:5000/chat --invoke Send '["me","hi"]'
              realtime signalr http://localhost:5000/chat --stream Counter '[10]' --json
              realtime signalr http://localhost:5000/chat --on ReceiveMessage --count 5

            Without --invoke or --stream it listens until --count invocations arrived (or forever).
            """)

    @Argument(help: "The hub's http:// or https:// URL") var url: String
    @OptionGroup var connectionOptions: ConnectionOptions
    @Option(name: .long, help: "websockets, sse or longpolling (default: the best the server offers)")
    var transport: String?
    @Option(name: .long, help: "json or messagepack") var `protocol`: String = "json"
    @Option(name: .long, parsing: .upToNextOption, help: "METHOD JSON-ARGS-ARRAY: invoke a hub method and print its result")
    var invoke: [String] = []
    @Option(name: .long, parsing: .upToNextOption, help: "METHOD JSON-ARGS-ARRAY: start a server-to-client stream and print its items")
    var stream: [String] = []
    @Option(name: .long, help: "Print invocations of this client method (repeatable).") var on: [String] = []
    @Option(name: .long, help: "With --on and nothing else: stop after this many invocations.") var count: Int?
    @Option(name: .long, help: "A bearer token for negotiate and the transport.") var accessToken: String?
    @Flag(name: .long, help: "Connect straight to the WebSocket, without negotiate.") var skipNegotiation = false

    var json: Bool { connectionOptions.json }

    func validate() throws {
        if !invoke.isEmpty, invoke.count != 2 { throw ValidationError("--invoke takes METHOD and a JSON array of arguments") }
        if !stream.isEmpty, stream.count != 2 { throw ValidationError("--stream takes METHOD and a JSON array of arguments") }
        guard HubProtocolType(rawValue: `protocol`) != nil else { throw ValidationError("--protocol is json or messagepack") }
        if let transport, Self.transports[transport] == nil { throw ValidationError("--transport is websockets, sse or longpolling") }
    }

    static let transports: [String: HttpTransportType] = ["websockets": .webSockets, "sse": .serverSentEvents, "longpolling": .longPolling]

    static func arguments(_ text: String) throws -> [JSONValue] {
        guard case .array(let values) = try JSONValue(parsing: text) else { throw ValidationError("arguments must be a JSON array, got \(text)") }
        return values
    }

    func line(_ kind: String, _ name: String, _ value: JSONValue) -> String {
        json
            ? "{\"kind\":\(JSONText.quote(kind)),\"method\":\(JSONText.quote(name)),\"value\":\(value.jsonString)}"
            : "\(kind) \(name): \(value.jsonString)"
    }

    func run() async throws {
        let headers = try connectionOptions.headerDictionary
        let tls = connectionOptions.tls
        let timeout = connectionOptions.connectTimeout
        let token = accessToken
        let runtime = connectionOptions.runtime
        let connection = HubConnectionBuilder()
            .withUrl(url: url, transport: transport.flatMap { Self.transports[$0] } ?? .all)
            .withHubProtocol(hubProtocol: HubProtocolType(rawValue: `protocol`)!)
            .withOptions { options in
                options.headers = headers
                options.skipNegotiation = skipNegotiation
                if skipNegotiation { options.transports = .webSockets }
                if let token { options.accessTokenProvider = { token } }
                options.tls = tls
                options.handshakeTimeout = timeout
                options.negotiateTimeout = timeout
            }
            .withRuntime(runtime)
            .build()
        // Handlers print themselves: they run one at a time in arrival order, so a blocked stdout
        // holds the handler and, past the connection's handler queue, the socket reads. Nothing
        // here buffers invocations. `listening` gets one value: --count reached, or the end.
        let listening = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let counter = InvocationCounter()
        for method in on {
            connection.on(method, rawHandler: { arguments in
                let seen = await counter.increment()
                if let count = self.count, seen > count { return }
                say(self.line("invocation", method, .array(arguments)))
                if let count = self.count, seen == count { listening.continuation.finish() }
            })
        }
        let closed = AsyncStream.makeStream(of: String.self)
        connection.onClosed { error in
            if let error { closed.continuation.yield("\(error)") }
            listening.continuation.finish()
        }
        let command = self
        do {
            try await Interruption.run { try await command.exchange(connection, listening: listening.stream) }
        } catch let interrupted as ExitCode {
            await connection.stop()
            throw interrupted
        } catch {
            printError("realtime signalr: \(error)")
            await connection.stop()
            throw ExitCode.failure
        }
        await connection.stop()
        closed.continuation.finish()
        for await failure in closed.stream {
            printError("realtime signalr: the connection failed: \(failure)")
            throw ExitCode.failure
        }
    }

    /// Starts, then does what the flags ask.
    private func exchange(_ connection: HubConnection, listening: AsyncStream<Void>) async throws {
        try await connection.start()
        printError("realtime signalr: connected over \(connection.transport.map { "\($0)" } ?? "?") with \(`protocol`)")
        if invoke.count == 2 {
            let result = try await connection.invokeRaw(method: invoke[0], arguments: try Self.arguments(invoke[1]))
            say(line("result", invoke[0], result ?? .null))
        }
        if stream.count == 2 {
            let items = try await connection.streamRaw(method: stream[0], arguments: try Self.arguments(stream[1]))
            // On the connection's event loop: an item read is printed by the thread that read it.
            try await withTaskExecutorPreference(connection.taskExecutor) {
                for try await item in items { say(line("item", stream[0], item)) }
            }
        }
        if invoke.isEmpty, stream.isEmpty {
            for await _ in listening {}
        }
    }
}

/// How many invocations the `--on` handlers printed.
actor InvocationCounter {
    private var value = 0
    func increment() -> Int {
        value += 1
        return value
    }
}
