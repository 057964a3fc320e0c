// A chat service in SwiftSignalRClient's README style: a plain class keeps the connection, builds it
// in init, registers typed handlers capturing self, starts from synchronous code, and hears the
// lifecycle through a delegate. Callbacks come on the main queue (the default callbackQueue).
import Foundation
import SignalRClient

protocol ChatServiceDelegate: AnyObject {
    func chatService(_ service: ChatHubService, didReceive message: String, from user: String)
    func chatServiceDidConnect(_ service: ChatHubService)
    func chatService(_ service: ChatHubService, didDisconnectWith error: Error?)
}

final class ChatHubService: HubConnectionDelegate {
    private var connection: SignalRClient.HubConnection
    weak var delegate: ChatServiceDelegate?
    private(set) var isConnected = false
    private var pending: [(String, String)] = []

    init(url: URL, token: @escaping () -> String?) {
        connection = HubConnectionBuilder(url: url)
            .withLogging(minLogLevel: .warning)
            .withAutoReconnect()
            .withHttpConnectionOptions { options in
                options.accessTokenProvider = token
                options.headers = ["X-Client": "ios-chat"]
            }
            .build()
        connection.delegate = self
        connection.on(method: "NewMessage", callback: { (user: String, message: String) in
            self.handleMessage(message, from: user)
        })
        connection.on(method: "UserJoined") { [weak self] (user: String) in
            self?.handleMessage("joined", from: user)
        }
        connection.on(method: "Ping") { print("ping") }
        connection.start()
    }

    func send(_ message: String, as user: String) {
        guard isConnected else {
            pending.append((user, message))
            return
        }
        connection.invoke(method: "Broadcast", user, message) { error in
            if let error = error {
                print("Broadcast failed: \(error)")
            }
        }
    }

    func typing(_ user: String) {
        connection.send(method: "Typing", user)
    }

    func history(completion: @escaping ([String]) -> Void) {
        connection.invoke(method: "History", arguments: [50], resultType: [String].self) { result, error in
            completion(result ?? [])
            if let error = error as? SignalRError, case .hubInvocationError(let message) = error {
                print("server said: \(message)")
            }
        }
    }

    func disconnect() {
        connection.stop()
    }

    private func handleMessage(_ message: String, from user: String) {
        delegate?.chatService(self, didReceive: message, from: user)
    }

    // MARK: HubConnectionDelegate

    func connectionDidOpen(hubConnection: HubConnection) {
        isConnected = true
        print("connected: \(hubConnection.connectionId ?? "-")")
        let queued = pending
        pending = []
        for (user, message) in queued { send(message, as: user) }
        delegate?.chatServiceDidConnect(self)
    }

    func connectionDidFailToOpen(error: Error) {
        isConnected = false
        delegate?.chatService(self, didDisconnectWith: error)
    }

    func connectionDidClose(error: Error?) {
        isConnected = false
        delegate?.chatService(self, didDisconnectWith: error)
    }

    func connectionWillReconnect(error: Error) {
        isConnected = false
    }

    func connectionDidReconnect() {
        isConnected = true
    }
}
